package doccheck

import (
	"path"
	"regexp"
	"slices"
	"strings"
)

var (
	envVar     = regexp.MustCompile(`CRAIG_[A-Z0-9_<>]*[A-Z0-9>]`)
	snakeWord  = regexp.MustCompile(`^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$`)
	dottedName = regexp.MustCompile(`^[a-z][a-z0-9_]*(?:\.[a-z0-9_<>]+)+$`)
	metricName = regexp.MustCompile(`\b((?:retention|archive|outbox|event|events|admin)_[a-z0-9_]+?_(?:total|seconds|rows|bytes))(?:_bucket|_sum|_count)?\b`)
	alertName  = regexp.MustCompile(`^(?:Retention|Archive|Outbox)[A-Z][A-Za-z]+$`)
	anyRoute   = regexp.MustCompile(`(?:^|[\s'"=]|[\w.-]+:\d+|https?://[\w.-]+(?::\d+)?)(/(?:admin|metrics|healthz|readyz)\b[^\s'"?)\]]*)`)
	methodPath = regexp.MustCompile(`\b(GET|POST|PUT|DELETE|PATCH) (/[^\s'"?)\]` + "`" + `]*)`)
	pathish    = regexp.MustCompile(`^\.{0,2}/?[A-Za-z0-9_.<>*-]+(?:/[A-Za-z0-9_.<>*-]*)+$|^[A-Za-z0-9_.<>*-]+\.(?:go|md|sql|yml|yaml|json|mod|work)$`)
	lineSuffix = regexp.MustCompile(`(?::\d+)+$`)
	goSymbol   = regexp.MustCompile(`\.[A-Z][A-Za-z0-9_.]*$`)
	repoFile   = regexp.MustCompile(`\.(?:go|md|sql|yml|yaml|mod|work)$`)
	fileName   = regexp.MustCompile(`\.(?:go|md|sql|yml|yaml|json|mod|work|sum|txt|pem|token|secret|log|pid|ndjson)$`)
)

// checkNames checks the names that may stand anywhere in code: variables,
// routes and metrics (in PromQL too).
func (f Facts) checkNames(code string, report reporter) {
	for _, v := range envVar.FindAllString(code, -1) {
		if !matchAny(v, f.EnvVars) {
			report("env", v)
		}
	}
	methods := methodPath.FindAllStringSubmatch(code, -1)
	for _, m := range methods {
		if p := strings.TrimRight(m[2], ".,:;"); !f.routeExists(m[1], p) {
			report("route", m[1]+" "+p)
		}
	}
	if len(methods) == 0 {
		for _, m := range anyRoute.FindAllStringSubmatch(code, -1) {
			if p := strings.TrimRight(m[1], ".,:;"); !f.routeExists("", p) {
				report("route", p)
			}
		}
	}
	for _, m := range metricName.FindAllStringSubmatch(code, -1) {
		if !f.Metrics[m[1]] {
			report("metric", m[1])
		}
	}
}

// checkBlockPaths checks the repository paths on a line of a fenced block
// (./x, or a path to a repository file).
func (f Facts) checkBlockPaths(code string, report reporter) {
	for _, tok := range strings.FieldsFunc(code, func(r rune) bool { return r == ' ' || r == '=' || r == '"' || r == '\'' || r == '(' || r == ')' }) {
		tok = strings.TrimRight(tok, ".,;:`")
		if strings.HasPrefix(tok, "./") || (strings.Contains(tok, "/") && repoFile.MatchString(lineSuffix.ReplaceAllString(tok, ""))) {
			if pathish.MatchString(lineSuffix.ReplaceAllString(tok, "")) {
				f.checkPath(tok, report)
			}
		}
	}
}

// checkSpan checks a whole inline code span naming one thing.
func (f Facts) checkSpan(span string, report reporter) {
	word, _, _ := strings.Cut(span, "=")
	word, _, _ = strings.Cut(word, "{")
	switch {
	case alertName.MatchString(word):
		if !f.Alerts[word] {
			report("alert", word)
		}
	case metricName.MatchString(word) && metricName.FindString(word) == word:
		// checked by checkNames
	case dottedName.MatchString(word) && !fileName.MatchString(word) && (f.isSection(word) || strings.Contains(word, "_")):
		first, _, _ := strings.Cut(word, ".")
		tableColumn := !f.isSection(word) && f.Words[first] // archive_ledger.legal_hold
		if !matchAny(word, f.Keys) && !f.Literals[word] && !f.derived(word) && !tableColumn {
			report("key", word)
		}
	case snakeWord.MatchString(word):
		if !f.Words[word] && !matchAny(word, f.Keys) && !f.derived(word) {
			report("word", word)
		}
	case pathish.MatchString(lineSuffix.ReplaceAllString(span, "")) && !strings.Contains(span, "://"):
		f.checkPath(span, report)
	}
}

// derived: word is a source word (or a service's name) followed by a
// suffix literal of the code ("audit_log" + "_hot_window_overrun",
// "security" + ".archive_completed").
func (f Facts) derived(word string) bool {
	for i := 1; i < len(word); i++ {
		if word[i] != '_' && word[i] != '.' {
			continue
		}
		prefix := word[:i]
		if (f.Words[prefix] || slices.Contains(f.Services, prefix)) && f.Literals[word[i:]] {
			return true
		}
	}
	return false
}

// isSection: the name's first part is a settings section ("archive").
func (f Facts) isSection(word string) bool {
	first, _, _ := strings.Cut(word, ".")
	for _, k := range f.Keys {
		if strings.HasPrefix(k, first+".") {
			return true
		}
	}
	return false
}

// yamlBlock follows the key path of a fenced YAML block.
type yamlBlock struct {
	path    []string
	indents []int
	skip    bool // the block is not a settings file
}

// checkYAMLLine checks a settings file's keys: a block whose first key is
// no settings key or section (a fleet file, a rule file) is not checked.
func (f Facts) checkYAMLLine(b *yamlBlock, line string, report reporter) {
	trimmed := strings.TrimSpace(line)
	if b.skip || trimmed == "" || strings.HasPrefix(trimmed, "#") || strings.HasPrefix(trimmed, "-") {
		return
	}
	key, _, ok := strings.Cut(trimmed, ":")
	if !ok {
		return
	}
	indent := len(line) - len(strings.TrimLeft(line, " "))
	for len(b.indents) > 0 && b.indents[len(b.indents)-1] >= indent {
		b.indents, b.path = b.indents[:len(b.indents)-1], b.path[:len(b.path)-1]
	}
	b.indents, b.path = append(b.indents, indent), append(b.path, key)
	full := strings.Join(b.path, ".")
	known := matchAny(full, f.Keys) || f.prefixOfKey(full)
	if len(b.path) == 1 && !known {
		b.skip = true
		return
	}
	if !known {
		report("key", full)
	}
}

// prefixOfKey: name is a nesting level of some key ("archive.purge").
func (f Facts) prefixOfKey(name string) bool {
	for _, k := range f.Keys {
		if strings.HasPrefix(k, name+".") {
			return true
		}
	}
	return false
}

// routeExists: the path (placeholders {x} or <x> allowed) is a served
// route, by method when one is given; a path ending in / or … names the
// routes under it.
func (f Facts) routeExists(method, p string) bool {
	prefix, open := strings.CutSuffix(strings.TrimSuffix(p, "…"), "/")
	open = open || strings.HasSuffix(p, "…")
	for _, r := range f.Routes {
		rm, rp, _ := strings.Cut(r, " ")
		if method != "" && rm != method {
			continue
		}
		if open && strings.HasPrefix(rp, prefix) || samePath(rp, p) {
			return true
		}
	}
	return false
}

func samePath(route, p string) bool {
	rs, ps := strings.Split(route, "/"), strings.Split(p, "/")
	if len(rs) != len(ps) {
		return false
	}
	for i := range rs {
		if rs[i] != ps[i] && !placeholder(rs[i]) && !placeholder(ps[i]) {
			return false
		}
	}
	return true
}

func placeholder(seg string) bool {
	return strings.HasPrefix(seg, "{") || strings.HasPrefix(seg, "<")
}

// nonRepoRoots are path roots that are not the repository's: built
// binaries, object keys, the user's cache.
var nonRepoRoots = []string{"bin", "retention-archives", "~", "$", "tmp", "etc", "var", "proc", "http", "s3:"}

func (f Facts) checkPath(word string, report reporter) {
	p := lineSuffix.ReplaceAllString(word, "") // file.go:42 names file.go
	p = strings.TrimSuffix(strings.TrimPrefix(p, "./"), "/...")
	p = goSymbol.ReplaceAllString(p, "") // kernel/app.Run names the package kernel/app
	first, _, _ := strings.Cut(p, "/")
	if p == "" || p == "..." || strings.HasPrefix(p, "/") || strings.HasPrefix(first, "<") ||
		slices.ContainsFunc(nonRepoRoots, func(r string) bool { return strings.HasPrefix(first, r) }) {
		return
	}
	if !strings.HasPrefix(word, "./") && !f.Exists(first) && !strings.HasSuffix(p, "/") && !repoFile.MatchString(p) {
		return // an object key, a format, a module path: not a repository path
	}
	g := globOf(strings.TrimSuffix(p, "/"))
	if !f.Exists(g) && !f.Exists(g+"_*") && !f.Exists(path.Join(f.dir, g)) {
		report("path", word)
	}
}

// globOf turns placeholders (<name>) into wildcards.
func globOf(p string) string {
	return regexp.MustCompile(`<[^>]*>`).ReplaceAllString(p, "*")
}

func (f Facts) checkLink(file, target string, report reporter) {
	if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
		return
	}
	target = strings.Trim(target, "<>")
	p, anchor, _ := strings.Cut(target, "#")
	resolved := file
	if p != "" {
		resolved = path.Join(path.Dir(file), p)
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
