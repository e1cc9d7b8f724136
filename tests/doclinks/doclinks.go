// Package doclinks checks the links between the repository's Markdown
// files, so a renamed file or heading cannot leave a dead link behind: a
// relative link must name a file or directory that exists, and its
// #fragment must be an anchor a heading of the target produces by
// GitHub's rules. Links with a scheme (https:, mailto:) are not checked.
package doclinks

import (
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Problem is one broken link.
type Problem struct {
	// File is the Markdown file holding the link, relative to the root;
	// Line counts from 1.
	File string
	Line int
	// Link is the destination as written; Reason says what is wrong.
	Link, Reason string
}

func (p Problem) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", p.File, p.Line, p.Link, p.Reason)
}

// skipDirs are directories that hold no documentation of the project:
// dependencies, build output, and test fixtures (which may break links on
// purpose).
var skipDirs = []string{"node_modules", "testdata", "bin"}

// Files lists the Markdown files under root, relative to it and sorted,
// leaving out hidden directories (.git, .data) and skipDirs.
func Files(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || slices.Contains(skipDirs, d.Name())) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.EqualFold(filepath.Ext(p), ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing the Markdown files under %s: %w", root, err)
	}
	slices.Sort(files)
	return files, nil
}

// Check checks every link of files (relative to root, as Files lists
// them) and returns the broken ones, in file and line order.
func Check(root string, files []string) ([]Problem, error) {
	c := checker{root: root, anchors: map[string]map[string]bool{}}
	var problems []Problem
	for _, f := range files {
		doc, err := c.read(f)
		if err != nil {
			return nil, err
		}
		for _, l := range doc.links {
			if reason := c.check(f, l.dest); reason != "" {
				problems = append(problems, Problem{File: f, Line: l.line, Link: l.dest, Reason: reason})
			}
		}
	}
	return problems, nil
}

type checker struct {
	root string
	// anchors caches each Markdown file's anchors by its slash path.
	anchors map[string]map[string]bool
}

func (c *checker) read(file string) (document, error) {
	b, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(file)))
	if err != nil {
		return document{}, fmt.Errorf("reading %s: %w", file, err)
	}
	doc := parse(string(b))
	c.anchors[file] = doc.anchors
	return doc, nil
}

// scheme matches a destination with a URL scheme: not a relative link.
var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// lineAnchor is GitHub's anchor of a line or lines of a file that is not
// rendered as Markdown.
var lineAnchor = regexp.MustCompile(`^L[0-9]+(-L[0-9]+)?$`)

// check says what is wrong with the link dest in file, "" when nothing.
func (c *checker) check(file, dest string) string {
	if scheme.MatchString(dest) || strings.HasPrefix(dest, "//") {
		return ""
	}
	target, fragment, hasFragment := strings.Cut(dest, "#")
	target, _, _ = strings.Cut(target, "?")
	target, err := url.PathUnescape(target)
	if err != nil {
		return "the path is not valid URL escaping"
	}
	if fragment, err = url.PathUnescape(fragment); err != nil {
		return "the anchor is not valid URL escaping"
	}
	targetFile := file
	if target != "" {
		if strings.HasPrefix(target, "/") {
			targetFile = path.Clean(strings.TrimPrefix(target, "/"))
		} else {
			targetFile = path.Join(path.Dir(file), target)
		}
		if targetFile == ".." || strings.HasPrefix(targetFile, "../") {
			return "the path leaves the repository"
		}
		info, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(targetFile)))
		if err != nil {
			return fmt.Sprintf("%s does not exist", targetFile)
		}
		if info.IsDir() {
			if hasFragment {
				return fmt.Sprintf("%s is a directory: it has no anchor %q", targetFile, fragment)
			}
			return ""
		}
	}
	if !hasFragment || fragment == "" {
		return "" // "#" alone is the top of the page
	}
	if !strings.EqualFold(path.Ext(targetFile), ".md") {
		if lineAnchor.MatchString(fragment) {
			return ""
		}
		return fmt.Sprintf("%s is not Markdown: its only anchors are lines (#L12)", targetFile)
	}
	anchors, ok := c.anchors[targetFile]
	if !ok {
		doc, err := c.read(targetFile)
		if err != nil {
			return err.Error()
		}
		anchors = doc.anchors
	}
	if !anchors[fragment] {
		return fmt.Sprintf("no heading of %s has the anchor #%s", targetFile, fragment)
	}
	return ""
}
