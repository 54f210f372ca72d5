// Package doccheck finds the names a document uses that the repository does
// not have: a craigctl or service command or flag, a mage target, a settings
// key or environment variable, a metric, an HTTP path, a file path or a link
// (with its anchor). Its test runs it over every document of the repository,
// so a rename that leaves a page behind fails `go test ./...`.
//
// Only code (inline code spans and fenced blocks) and links are read: prose
// may say anything, but what a reader would type or click must exist.
package doccheck

import (
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Facts are the names that exist, gathered from the repository (Gather).
type Facts struct {
	// Craigctl maps every command path ("craigctl archive fetch") to the
	// long flags it accepts.
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
	// Metrics are the registered metric names.
	Metrics map[string]bool
	// Routes are the HTTP paths the services serve ("/admin/archive/rows/{table}").
	Routes []string
	// Words are the identifiers of the sources (Go, SQL, YAML, JSON): a
	// code span that is one snake_case word must be one of them, a key, or
	// a word of them with a suffix the code appends (a Literal starting
	// with "_", as "<table>" + "_future_dated").
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
	Kind string // command, flag, target, key, env, metric, route, path, link, word
	Name string
}

func (f Finding) String() string {
	return fmt.Sprintf("%s:%d: %s %q does not exist", f.File, f.Line, f.Kind, f.Name)
}

var (
	codeSpan  = regexp.MustCompile("`([^`]+)`")
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	envVar    = regexp.MustCompile(`CRAIG_[A-Z0-9_<>]*[A-Z0-9>]`)
	longFlag  = regexp.MustCompile(`(?:^|[\s\[(|])--([a-z][a-z0-9-]*)`)
	snakeWord = regexp.MustCompile(`^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$`)
	dottedKey = regexp.MustCompile(`^[a-z][a-z0-9_]*(?:\.[a-z0-9_<>]+)+$`)
	metricish = regexp.MustCompile(`^((?:retention|archive|outbox|event|events|admin)_[a-z0-9_]+_(?:total|seconds|rows|bytes))(?:\{[^}]*\})?$`)
	routeish  = regexp.MustCompile(`(?:^|[\s'"])(/(?:admin|metrics|healthz|readyz)[^\s'"?]*)`)
	mageCall  = regexp.MustCompile(`go tool mage\s+([^\s|;&)]+)`)
	ctlCall   = regexp.MustCompile(`^(?:\$ )?(?:go run \./cmd/)?craigctl((?:\s+[^\s|;&#)]+)*)`)
	pathish   = regexp.MustCompile(`^\.{0,2}/?[A-Za-z0-9_.<>*-]+(?:/[A-Za-z0-9_.<>*-]*)+$|^[A-Za-z0-9_.<>*-]+\.(?:go|md|sql|yml|yaml|json|mod|work)$`)
)

// Check returns the dangling names of one markdown document; file is its
// repository path (slash-separated).
func Check(file string, text string, f Facts) []Finding {
	var out []Finding
	f.dir = path.Dir(file)
	inBlock := false
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		report := func(kind, name string) { out = append(out, Finding{file, n, kind, name}) }
		if inBlock {
			f.checkCode(line, false, report)
			continue
		}
		for _, m := range codeSpan.FindAllStringSubmatch(line, -1) {
			f.checkCode(m[1], true, report)
		}
		for _, m := range mdLink.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			f.checkLink(file, m[1], report)
		}
	}
	return out
}

// checkCode checks one piece of code: a whole span (span true) or a line of
// a fenced block.
func (f Facts) checkCode(code string, span bool, report func(kind, name string)) {
	f.checkCommands(code, report)
	for _, v := range envVar.FindAllString(code, -1) {
		if !matchAny(v, f.EnvVars) {
			report("env", v)
		}
	}
	for _, m := range routeish.FindAllStringSubmatch(code, -1) {
		if !f.routeExists(strings.TrimRight(m[1], ".,:;`")) {
			report("route", m[1])
		}
	}
	if !span {
		return
	}
	word := strings.TrimSpace(code)
	switch {
	case metricish.MatchString(word):
		name := metricish.FindStringSubmatch(word)[1]
		if !f.Metrics[name] && !f.Metrics[strings.TrimSuffix(name, "_bucket")] {
			report("metric", name)
		}
	case dottedKey.MatchString(word) && f.isSection(word):
		if !matchAny(word, f.Keys) && !f.Literals[word] {
			report("key", word)
		}
	case snakeWord.MatchString(word):
		if !f.Words[word] && !matchAny(word, f.Keys) && !f.derived(word) {
			report("word", word)
		}
	case pathish.MatchString(word) && !strings.Contains(word, "://"):
		f.checkPath(word, report)
	}
}

// derived: word is a source word followed by a suffix literal of the code.
func (f Facts) derived(word string) bool {
	for i := 1; i < len(word); i++ {
		if word[i] == '_' && f.Words[word[:i]] && f.Literals[word[i:]] {
			return true
		}
	}
	return false
}

// isSection: the key's first part is a settings section ("archive").
func (f Facts) isSection(word string) bool {
	first, _, _ := strings.Cut(word, ".")
	for _, k := range f.Keys {
		if strings.HasPrefix(k, first+".") {
			return true
		}
	}
	return false
}

// checkCommands checks craigctl, mage and service command lines in code.
func (f Facts) checkCommands(code string, report func(kind, name string)) {
	for _, m := range mageCall.FindAllStringSubmatch(code, -1) {
		if t := strings.TrimRight(m[1], ".,`"); !strings.HasPrefix(t, "-") && !f.Mage[t] {
			report("target", t)
		}
	}
	for _, m := range ctlCall.FindAllStringSubmatch(strings.TrimSpace(code), -1) {
		f.checkCraigctl(strings.Fields(m[1]), report)
	}
	for _, svc := range append(slices.Clone(f.Services), "<svc>") {
		re := regexp.MustCompile(`^(?:\$ )?(?:\S*/)?` + regexp.QuoteMeta(svc) + `\s+([a-z][a-z-]*)((?:\s+[^|;&#]*)?)`)
		for _, m := range re.FindAllStringSubmatch(strings.TrimSpace(code), -1) {
			f.checkService(m[1], m[2], report)
		}
	}
}

func (f Facts) checkCraigctl(words []string, report func(kind, name string)) {
	path := "craigctl"
	i := 0
	for ; i < len(words); i++ {
		next := path + " " + words[i]
		if _, ok := f.Craigctl[next]; !ok {
			break
		}
		path = next
	}
	if i < len(words) && f.hasChildren(path) && regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(words[i]) {
		report("command", path+" "+words[i])
		return
	}
	for _, m := range longFlag.FindAllStringSubmatch(" "+strings.Join(words[i:], " "), -1) {
		if m[1] != "help" && !slices.Contains(f.Craigctl[path], m[1]) {
			report("flag", path+" --"+m[1])
		}
	}
}

func (f Facts) hasChildren(path string) bool {
	for p := range f.Craigctl {
		if strings.HasPrefix(p, path+" ") {
			return true
		}
	}
	return false
}

func (f Facts) checkService(verb, rest string, report func(kind, name string)) {
	if verb == "archive" {
		verb = "archive run"
		rest = strings.TrimPrefix(strings.TrimSpace(rest), "run")
	}
	flags, ok := f.Service[verb]
	if !ok {
		report("command", "<svc> "+verb)
		return
	}
	for _, m := range longFlag.FindAllStringSubmatch(rest, -1) {
		if m[1] != "help" && !slices.Contains(flags, m[1]) {
			report("flag", "<svc> "+verb+" --"+m[1])
		}
	}
}

// routeExists: the path (placeholders {x} or <x> allowed) is a served
// route; a path ending in / or … names the routes under it.
func (f Facts) routeExists(path string) bool {
	if strings.Contains(path, "…") || strings.HasSuffix(path, "/") {
		prefix := strings.TrimRight(strings.TrimSuffix(path, "…"), "/")
		for _, r := range f.Routes {
			if strings.HasPrefix(r, prefix) {
				return true
			}
		}
		return false
	}
	segs := strings.Split(path, "/")
	for _, r := range f.Routes {
		rs := strings.Split(r, "/")
		if len(rs) != len(segs) {
			continue
		}
		ok := true
		for i := range rs {
			if rs[i] != segs[i] && !placeholder(rs[i]) && !placeholder(segs[i]) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func placeholder(seg string) bool {
	return strings.HasPrefix(seg, "{") || strings.HasPrefix(seg, "<")
}

// nonRepoRoots are path roots that are not the repository's: built
// binaries, object keys, the user's cache.
var nonRepoRoots = []string{"bin", "retention-archives", "~", "$", "tmp", "etc", "var", "proc"}

func (f Facts) checkPath(word string, report func(kind, name string)) {
	p := strings.TrimSuffix(strings.TrimPrefix(word, "./"), "/...")
	p = goSymbol.ReplaceAllString(p, "") // kernel/app.Run names the package kernel/app
	first, _, _ := strings.Cut(p, "/")
	if strings.HasPrefix(p, "/") || strings.HasPrefix(first, "<") ||
		slices.ContainsFunc(nonRepoRoots, func(r string) bool { return strings.HasPrefix(first, r) }) {
		return
	}
	if !f.Exists(first) && !strings.HasSuffix(p, "/") && !repoFile.MatchString(p) {
		return // an object key, a format, a module path: not a repository path
	}
	g := globOf(strings.TrimSuffix(p, "/"))
	if !f.Exists(g) && !f.Exists(g+"_*") && !f.Exists(path.Join(f.dir, g)) {
		report("path", word)
	}
}

var (
	goSymbol = regexp.MustCompile(`\.[A-Z][A-Za-z0-9_.]*$`)
	repoFile = regexp.MustCompile(`\.(?:go|md|sql|yml|yaml|mod|work)$`)
)

// globOf turns placeholders (<name>) into wildcards.
func globOf(p string) string {
	return regexp.MustCompile(`<[^>]*>`).ReplaceAllString(p, "*")
}

func (f Facts) checkLink(file, target string, report func(kind, name string)) {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return
	}
	path, anchor, _ := strings.Cut(target, "#")
	resolved := file
	if path != "" {
		resolved = filepath.ToSlash(filepath.Join(filepath.Dir(file), path))
		if !f.Exists(resolved) {
			report("link", target)
			return
		}
	}
	if anchor == "" {
		return
	}
	anchors, ok := f.Anchors(resolved)
	if ok && !slices.Contains(anchors, anchor) {
		report("link", target)
	}
}

// matchAny: name equals one of names, either side's <placeholders>
// standing for any text.
func matchAny(name string, names []string) bool {
	for _, n := range names {
		if n == name || placeholderMatch(n, name) || placeholderMatch(name, n) {
			return true
		}
	}
	return false
}

func placeholderMatch(pattern, s string) bool {
	if !strings.Contains(pattern, "<") {
		return false
	}
	parts := regexp.MustCompile(`<[^>]*>`).Split(pattern, -1)
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	re, err := regexp.Compile("^" + strings.Join(parts, "[A-Za-z0-9_<>]+") + "$")
	return err == nil && re.MatchString(s)
}

// Anchor is the anchor GitHub gives a heading: lower case, spaces to
// hyphens, punctuation other than hyphens and underscores dropped.
func Anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}
