// Package doccheck finds the names a document uses that the repository does
// not have: a craigctl or service command or flag, a mage target, a settings
// key or environment variable, a metric or alert, an HTTP route, a file path
// or a link (with its anchor). Its test runs it over every document of the
// repository, so a rename that leaves a page behind fails `go test ./...`.
//
// Only code (inline code spans, fenced blocks) and links are read: prose
// may say anything, but what a reader would type or click must exist.
package doccheck

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// Facts are the names that exist, gathered from the repository.
type Facts struct {
	// Craigctl maps every command path ("craigctl archive fetch") to the
	// flags it accepts (its own and inherited): long names and one-letter
	// shorthands.
	Craigctl map[string][]string
	// Service maps every service binary command ("sweep", "archive run")
	// to its flags.
	Service map[string][]string
	// Services are the service names ("rules"); "<svc>" stands for any.
	Services []string
	// Mage are the mage targets and aliases ("store:up", "test").
	Mage map[string]bool
	// Keys are the settings keys ("archive.enabled"), EnvVars their
	// variables and every other CRAIG_* variable the code reads.
	Keys, EnvVars []string
	// Metrics are the registered metric names; Alerts the alert names of
	// the shipped rule files.
	Metrics, Alerts map[string]bool
	// Routes are the served routes, "METHOD /path" ("GET /admin/retention").
	Routes []string
	// Words are the identifiers of the sources (Go, SQL, YAML, JSON): a
	// code span that is one snake_case word must be one of them, a key, or
	// a word of them with a suffix the code appends (a Literal starting
	// with "_" or ".", as "<table>" + "_future_dated").
	Words map[string]bool
	// Literals are the Go string literals: a dotted name that is no
	// settings key (a failpoint, an event type) must be one of them.
	Literals map[string]bool
	// Exists reports whether a repository path (slash-separated, relative
	// to the root; it may hold * wildcards) names a file or directory.
	Exists func(pattern string) bool
	// Anchors returns the heading anchors of a repository document, and
	// false when it is not a markdown file of the repository.
	Anchors func(path string) ([]string, bool)

	dir string // the checked document's directory
}

// Finding is one dangling name.
type Finding struct {
	File string
	Line int
	Kind string // command, flag, target, key, env, metric, alert, route, path, link, word
	Name string
}

func (f Finding) String() string {
	return fmt.Sprintf("%s:%d: %s %q does not exist", f.File, f.Line, f.Kind, f.Name)
}

type reporter func(kind, name string)

var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	fence    = regexp.MustCompile("^\\s*(```|~~~)\\s*([a-z]*)")
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	refLink  = regexp.MustCompile(`^\s*\[[^\]]+\]:\s*(\S+)`)
	htmlLink = regexp.MustCompile(`(?:href|src)="([^"]+)"`)
)

// Check returns the dangling names of one markdown document; file is its
// repository path (slash-separated).
func Check(file, text string, f Facts) []Finding {
	var out []Finding
	f.dir = path.Dir(file)
	var block *yamlBlock
	inBlock, marker := false, ""
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		report := func(kind, name string) {
			if fd := (Finding{file, n, kind, name}); !slices.Contains(out, fd) {
				out = append(out, fd)
			}
		}
		if m := fence.FindStringSubmatch(line); m != nil && (!inBlock || m[1] == marker) {
			inBlock, marker = !inBlock, m[1]
			block = nil
			if inBlock && m[2] == "yaml" {
				block = &yamlBlock{}
			}
			continue
		}
		if inBlock {
			if block != nil {
				f.checkYAMLLine(block, line, report)
				continue
			}
			f.checkCode(line, false, report)
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
			f.checkCode(m[1], true, report)
		}
		prose := codeSpan.ReplaceAllString(line, "")
		for _, re := range []*regexp.Regexp{mdLink, refLink, htmlLink} {
			for _, m := range re.FindAllStringSubmatch(prose, -1) {
				f.checkLink(file, m[1], report)
			}
		}
	}
	return out
}

// CheckLink checks a link written in a file that is not markdown (an
// alert's runbook annotation); file is that file's repository path, and
// the target is resolved from the repository root.
func CheckLink(file, target string, f Facts) []Finding {
	var out []Finding
	f.checkLink("README.md", target, func(kind, name string) { out = append(out, Finding{file, 0, kind, name}) })
	return out
}

// checkCode checks one piece of code: a whole span (span true) or a line of
// a fenced block.
func (f Facts) checkCode(code string, span bool, report reporter) {
	for _, c := range commands(code) {
		f.checkCommand(c, report)
	}
	f.checkNames(code, report)
	if !span {
		f.checkBlockPaths(code, report)
	} else {
		f.checkSpan(strings.TrimSpace(code), report)
	}
}
