package doclinks

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// link is a link destination and the line it is on.
type link struct {
	line int
	dest string
}

// document is what parse finds in a Markdown file.
type document struct {
	links []link
	// anchors are the fragments the file's headings produce, and the
	// names and ids of its HTML anchors.
	anchors map[string]bool
}

var (
	fenceOpen = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})")
	atx       = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setext    = regexp.MustCompile(`^ {0,3}(?:=+|-+)[ \t]*$`)
	refDef    = regexp.MustCompile(`^ {0,3}\[([^\]]+)\]:[ \t]*(?:<([^>]*)>|(\S+))`)
	htmlName  = regexp.MustCompile(`(?i)<a\s[^>]*\b(?:name|id)="([^"]+)"`)
)

// parse reads the links and the anchors of a Markdown text, leaving out
// fenced code blocks and code spans, where nothing is a link.
func parse(text string) document {
	doc := document{anchors: map[string]bool{}}
	slugs := slugger{}
	var fence string // the open fence's marker, "" outside a fence
	prev := ""       // the previous line, when it may be a setext heading's text
	// defOK is whether a line may be a reference definition [ref]: dest,
	// which cannot continue a paragraph.
	defOK := true
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		line = strings.TrimSuffix(line, "\r")
		if fence != "" {
			if t := strings.TrimSpace(line); strings.HasPrefix(t, fence) && strings.Trim(t, fence[:1]) == "" {
				fence = ""
			}
			continue
		}
		if m := fenceOpen.FindStringSubmatch(line); m != nil {
			fence, prev, defOK = m[1], "", true
			continue
		}
		blank := strings.TrimSpace(line) == ""
		switch {
		case atx.MatchString(line):
			doc.anchors[slugs.slug(headingText(atx.FindStringSubmatch(line)[1]))] = true
		case setext.MatchString(line) && prev != "":
			doc.anchors[slugs.slug(headingText(prev))] = true
			prev, defOK = "", true
			continue
		}
		for _, m := range htmlName.FindAllStringSubmatch(line, -1) {
			doc.anchors[m[1]] = true
		}
		m := refDef.FindStringSubmatch(line)
		isDef := defOK && m != nil && !strings.HasPrefix(m[1], "^")
		if isDef {
			doc.links = append(doc.links, link{line: n, dest: m[2] + m[3]})
		} else {
			for _, d := range inlineLinks(line) {
				doc.links = append(doc.links, link{line: n, dest: d})
			}
		}
		prev = setextText(line)
		defOK = blank || isDef || atx.MatchString(line)
	}
	return doc
}

// setextText is line when it may be the text of a setext heading (the
// line under it all = or -): a paragraph line, not a heading, list item,
// quote, table row or blank line.
func setextText(line string) string {
	t := strings.TrimSpace(line)
	if t == "" || len(line)-len(strings.TrimLeft(line, " ")) > 3 || strings.ContainsAny(t[:1], "#>|-*+") || atx.MatchString(line) {
		return ""
	}
	return t
}

// inlineLinks returns the destinations of the inline links and images of
// line: [text](dest "title") and ![alt](dest).
func inlineLinks(line string) []string {
	masked := maskCode(line)
	var dests []string
	for i := 0; i+1 < len(masked); i++ {
		if masked[i] != ']' || masked[i+1] != '(' || !strings.Contains(masked[:i], "[") || (i > 0 && masked[i-1] == '\\') {
			continue
		}
		if d, ok := destination(line[i+2:]); ok {
			dests = append(dests, d)
		}
	}
	return dests
}

// destination reads a link destination at the start of s (after the
// "("): <dest>, or up to a space or the unbalanced ")", with backslash
// escapes resolved.
func destination(s string) (string, bool) {
	s = strings.TrimLeft(s, " \t")
	if strings.HasPrefix(s, "<") {
		end := strings.IndexByte(s, '>')
		if end < 0 {
			return "", false
		}
		return s[1:end], true
	}
	var b strings.Builder
	depth := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && unicode.IsPunct(rune(s[i+1])):
			i++
			b.WriteByte(s[i])
			continue
		case c == '(':
			depth++
		case c == ')' && depth == 0, c == ' ', c == '\t':
			return b.String(), b.Len() > 0
		case c == ')':
			depth--
		}
		b.WriteByte(c)
	}
	return "", false
}

// maskCode replaces the code spans of line, backticks included, with 'x'
// byte for byte, so offsets stay those of line and nothing inside a code
// span reads as a link.
func maskCode(line string) string {
	b := []byte(line)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		run := i
		for i < len(b) && b[i] == '`' {
			i++
		}
		ticks := line[run:i]
		end := closingTicks(line, i, ticks)
		if end < 0 {
			continue // no closing run: the backticks are literal
		}
		for j := run; j < end+len(ticks); j++ {
			b[j] = 'x'
		}
		i = end + len(ticks)
	}
	return string(b)
}

// closingTicks is the offset of the next run of exactly ticks in line
// from i, -1 when there is none.
func closingTicks(line string, i int, ticks string) int {
	for i < len(line) {
		j := strings.Index(line[i:], ticks)
		if j < 0 {
			return -1
		}
		start := i + j
		end := start + len(ticks)
		if end < len(line) && line[end] == '`' {
			for end < len(line) && line[end] == '`' {
				end++
			}
			i = end
			continue
		}
		return start
	}
	return -1
}

var (
	codeSpan  = regexp.MustCompile("(`+)(.*?)(?:`+)")
	imageOrLk = regexp.MustCompile(`!?\[([^\]]*)\](?:\([^)]*\)|\[[^\]]*\])`)
	htmlTag   = regexp.MustCompile(`<[^>]+>`)
	escaped   = regexp.MustCompile(`\\([[:punct:]])`)
)

// headingText is the text a heading renders as: code spans as their
// content, links and images as their text, HTML tags dropped, escapes
// resolved.
func headingText(s string) string {
	s = codeSpan.ReplaceAllString(s, "$2")
	s = imageOrLk.ReplaceAllString(s, "$1")
	s = htmlTag.ReplaceAllString(s, "")
	s = escaped.ReplaceAllString(s, "$1")
	return strings.TrimSpace(s)
}

// slugger makes GitHub's heading anchors: the slug of the text, and for a
// slug taken already the first of slug-1, slug-2, ... not taken.
type slugger map[string]int

func (s slugger) slug(text string) string {
	base := slug(text)
	result := base
	for {
		if _, taken := s[result]; !taken {
			break
		}
		s[base]++
		result = base + "-" + strconv.Itoa(s[base])
	}
	s[result] = 0
	return result
}

// slug is GitHub's anchor of a heading's text: lower case, every
// character but letters, digits, marks, spaces, hyphens and underscores
// removed, each space a hyphen.
func slug(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
