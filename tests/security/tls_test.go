package security_test

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// pki is a throwaway CA with a server and a client certificate, as PEM
// files in one directory.
type pki struct {
	dir string
	ca  *x509.Certificate
	key *ecdsa.PrivateKey
}

func newCA(t *testing.T, dir, name string) *pki {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &pki{dir: dir, ca: ca, key: key}
	writePEM(t, filepath.Join(dir, name+".pem"), "CERTIFICATE", der)
	return p
}

// issue writes <name>.pem and <name>-key.pem, signed by the CA.
func (p *pki) issue(t *testing.T, name string, usage x509.ExtKeyUsage) {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	if usage == x509.ExtKeyUsageServerAuth {
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(p.dir, name+".pem"), "CERTIFICATE", der)
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(p.dir, name+"-key.pem"), "EC PRIVATE KEY", kder)
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t *testing.T) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startTLS starts single.conf with tls.conf included, its certificate paths
// pointed at a fresh PKI. With mutual, the server also requires a client
// certificate, as `verify: true` in tls.conf does.
func startTLS(t *testing.T, mutual bool) (addr, certs string) {
	t.Helper()
	dir := copyConfigs(t)
	certs = t.TempDir()
	p := newCA(t, certs, "ca")
	p.issue(t, "server", x509.ExtKeyUsageServerAuth)
	p.issue(t, "client", x509.ExtKeyUsageClientAuth)
	newCA(t, certs, "rogue-ca")

	conf, err := os.ReadFile(filepath.Join(dir, "tls.conf"))
	if err != nil {
		t.Fatal(err)
	}
	const deployed = "/etc/nats/tls/"
	if !bytes.Contains(conf, []byte(deployed)) {
		t.Fatalf("tls.conf no longer keeps its files in %s; update this test", deployed)
	}
	conf = bytes.ReplaceAll(conf, []byte(deployed), []byte(certs+string(filepath.Separator)))
	if err := os.WriteFile(filepath.Join(dir, "tls.conf"), conf, 0o600); err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(dir, "single-tls.conf")
	if err := os.WriteFile(node, []byte("include \"single.conf\"\ninclude \"tls.conf\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(node)
	if err != nil {
		t.Fatalf("parsing single.conf + tls.conf: %v", err)
	}
	if opts.TLSConfig == nil || opts.TLSConfig.MinVersion != tls.VersionTLS13 || opts.TLSVerify || opts.TLSTimeout != 2 {
		t.Fatalf("tls.conf parsed to TLSConfig set %v, verify %v, timeout %v: want TLS 1.3 minimum, verify off, 2s",
			opts.TLSConfig != nil, opts.TLSVerify, opts.TLSTimeout)
	}
	if mutual {
		tc, err := server.GenTLSConfig(&server.TLSConfigOpts{
			CertFile: filepath.Join(certs, "server.pem"),
			KeyFile:  filepath.Join(certs, "server-key.pem"),
			CaFile:   filepath.Join(certs, "ca.pem"),
			Verify:   true,
		})
		if err != nil {
			t.Fatal(err)
		}
		opts.TLSConfig, opts.TLSVerify = tc, true
	}
	opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.StoreDir = t.TempDir()
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(waitTimeout) {
		t.Fatal("TLS server not ready")
	}
	return s.ClientURL(), certs
}

func TestTLS(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		mutual bool
		opts   func(certs string) []nats.Option
		// wantErr is empty when the client must connect; otherwise a
		// fragment of the connect error.
		wantErr string
	}{
		{
			name: "client trusting the CA",
			opts: func(certs string) []nats.Option {
				return []nats.Option{nats.RootCAs(filepath.Join(certs, "ca.pem"))}
			},
		},
		{
			name:    "client trusting only the system roots",
			opts:    func(string) []nats.Option { return nil },
			wantErr: "certificate signed by unknown authority",
		},
		{
			name: "client trusting another CA",
			opts: func(certs string) []nats.Option {
				return []nats.Option{nats.RootCAs(filepath.Join(certs, "rogue-ca.pem"))}
			},
			wantErr: "certificate signed by unknown authority",
		},
		{
			name:   "mutual TLS with a client certificate",
			mutual: true,
			opts: func(certs string) []nats.Option {
				return []nats.Option{
					nats.RootCAs(filepath.Join(certs, "ca.pem")),
					nats.ClientCert(filepath.Join(certs, "client.pem"), filepath.Join(certs, "client-key.pem")),
				}
			},
		},
		{
			name:   "mutual TLS without a client certificate",
			mutual: true,
			opts: func(certs string) []nats.Option {
				return []nats.Option{nats.RootCAs(filepath.Join(certs, "ca.pem"))}
			},
			// TLS 1.3 finishes the client's handshake before the server
			// checks the client certificate: the refusal arrives as the
			// "certificate required" alert or as the connection closing,
			// depending on timing.
			wantErr: "tls",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr, certs := startTLS(t, tt.mutual)
			nc, err := nats.Connect(addr, append(tt.opts(certs), nats.NoReconnect(), nats.Timeout(waitTimeout))...)
			if tt.wantErr != "" {
				if err == nil {
					nc.Close()
					t.Fatalf("connected, want an error with %q", tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("connecting over TLS: %v", err)
			}
			defer nc.Close()
			state, err := nc.TLSConnectionState()
			if err != nil {
				t.Fatal(err)
			}
			if state.Version != tls.VersionTLS13 {
				t.Errorf("TLS version %x, want 1.3", state.Version)
			}
			if err := nc.FlushTimeout(waitTimeout); err != nil {
				t.Fatalf("round trip over TLS: %v", err)
			}
		})
	}
}

// TestTLSRefusesPlaintext speaks the NATS protocol without TLS: the server
// announces that TLS is required and never answers in plaintext.
func TestTLSRefusesPlaintext(t *testing.T) {
	t.Parallel()
	raw, _ := startTLS(t, false)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(waitTimeout)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("reading INFO: %v", err)
	}
	if !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("INFO %q does not require TLS", info)
	}
	if _, err := conn.Write([]byte("CONNECT {\"verbose\":false}\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	rest, err := readAll(r)
	t.Logf("plaintext client got %q, then %v", rest, err)
	var nerr net.Error
	if errors.As(err, &nerr) && nerr.Timeout() {
		t.Fatalf("server kept a plaintext connection open for %s", waitTimeout)
	}
	if bytes.Contains(rest, []byte("PONG")) {
		t.Fatalf("server answered a plaintext client: %q", rest)
	}
}

// readAll reads until the connection ends and returns what came and why it
// ended.
func readAll(r *bufio.Reader) ([]byte, error) {
	var out []byte
	buf := make([]byte, 512)
	for {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
	}
}
