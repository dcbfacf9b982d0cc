package main

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// readmeMaxLines is how long the README may grow: a landing page read in
// ten minutes, with the reference in docs/.
const readmeMaxLines = 300

// TestReadmeIsALandingPage: README.md stays within readmeMaxLines and links
// every page of docs/, so that a page is never written and then lost.
func TestReadmeIsALandingPage(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the reference to a page of docs/", n, readmeMaxLines)
	}
	linked := map[string]bool{}
	for _, l := range markdownLinks(string(readme)) {
		file, _, _ := strings.Cut(l, "#")
		linked[path.Clean(file)] = true
	}
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	design, err := filepath.Glob("docs/design/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(pages, design...) {
		if !linked[filepath.ToSlash(p)] {
			t.Errorf("README.md does not link %s", p)
		}
	}
}

// TestDocLinks: every relative link of README.md and docs/ names a file or
// directory that exists and, in a Markdown file, a heading it has.
func TestDocLinks(t *testing.T) {
	files := []string{"README.md", "CONTRIBUTING.md"}
	for _, pattern := range []string{"docs/*.md", "docs/design/*.md"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	anchors := map[string]map[string]bool{} // file → its headings' anchors
	anchorsOf := func(file string) map[string]bool {
		if a, ok := anchors[file]; ok {
			return a
		}
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		anchors[file] = headingAnchors(string(text))
		return anchors[file]
	}
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(string(text)) {
			target, anchor, _ := strings.Cut(l, "#")
			if target == "" {
				target = file
			} else {
				target = filepath.Join(filepath.Dir(file), filepath.FromSlash(target))
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s: link %s: no such file", file, l)
				continue
			}
			if anchor != "" && strings.HasSuffix(target, ".md") && !anchorsOf(target)[anchor] {
				t.Errorf("%s: link %s: %s has no heading with that anchor", file, l, target)
			}
		}
	}
}

var (
	linkTarget = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
)

// markdownLinks are the relative link targets of a Markdown text, outside
// code blocks and code spans.
func markdownLinks(text string) []string {
	var links []string
	for _, line := range proseLines(text) {
		for _, m := range linkTarget.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			if !strings.Contains(m[1], "://") && !strings.HasPrefix(m[1], "mailto:") {
				links = append(links, m[1])
			}
		}
	}
	return links
}

// proseLines are the lines of a Markdown text outside fenced code blocks.
func proseLines(text string) []string {
	var lines []string
	fenced := false
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			lines = append(lines, line)
		}
	}
	return lines
}

// headingAnchors are the anchors GitHub gives a Markdown text's headings:
// lower case, punctuation dropped, spaces as dashes, and -1, -2, ... after
// a repeated one.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range proseLines(text) {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(title)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}
