package httpapi

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
)

// uiFiles are the dashboard's static assets: hand-written HTML, JS and CSS
// with no external reference, so the page works on a machine without
// internet access.
//
//go:embed ui/index.html ui/app.js ui/app.css
var uiFiles embed.FS

// uiContentSecurityPolicy keeps the page to its own origin: no CDN, no
// inline script, nothing leaves the broker.
const uiContentSecurityPolicy = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; " +
	"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// registerUI adds the dashboard's routes:
//
//	GET /ui, /ui/     the page (index.html)
//	GET /ui/{file}    its script and style sheet
//	GET /v1/overview  the figures the page shows (token required, as the API)
//
// The static files hold no data, so they are served without the token; the
// page asks for the token when an API call answers 401 and keeps it in
// sessionStorage for the tab's life.
func (h *handler) registerUI(mux *http.ServeMux) {
	mux.Handle("GET /v1/overview", h.auth(h.overview))
	static, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic("httpapi: embedded ui folder: " + err.Error()) // the embed directive guarantees it
	}
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /ui/{file...}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("file")
		if name == "" {
			name = "index.html"
		}
		data, err := fs.ReadFile(static, path.Clean(name))
		if err != nil {
			writeError(w, h.logger, r, newError(http.StatusNotFound, CodeNotFound, "", "no dashboard file "+name))
			return
		}
		ctype := map[string]string{
			".html": "text/html; charset=utf-8",
			".js":   "text/javascript; charset=utf-8",
			".css":  "text/css; charset=utf-8",
		}[path.Ext(name)]
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("Content-Security-Policy", uiContentSecurityPolicy)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("Cache-Control", "no-cache")
		if _, err := w.Write(data); err != nil {
			h.logger.DebugContext(r.Context(), "writing a dashboard file", "file", name, "error", err)
		}
	})
}

// overview serves GET /v1/overview: admin.Overview's document, read at most
// once per OverviewCacheTTL.
func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	ov, err := h.overviews.get(r.Context())
	if err != nil {
		writeError(w, h.logger, r, newError(http.StatusServiceUnavailable, CodeUnavailable, "", err.Error()))
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, h.logger, r, http.StatusOK, ov)
}
