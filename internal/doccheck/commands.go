package doccheck

import (
	"path"
	"regexp"
	"slices"
	"strings"
)

// command is one program call of a shell line: the program's name (its
// path's last element) and its arguments.
type command struct {
	prog string
	args []string
}

var (
	separators = regexp.MustCompile(`&&|\|\||[|;]|\$\(`)
	assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
	word       = regexp.MustCompile(`^[a-z][a-z-]*$`)
	// shellComment is a # comment to the end of the line.
	shellComment = regexp.MustCompile(`(?:^|\s)#.*$`)
)

// commands splits a shell line into its program calls: at &&, ||, | and ;,
// without a leading "$ " prompt or environment assignments; `go run PKG`
// is the program PKG and `go tool mage` the program mage.
func commands(code string) []command {
	var out []command
	code = shellComment.ReplaceAllString(code, "")
	for _, seg := range separators.Split(code, -1) {
		fields := strings.Fields(seg)
		if len(fields) > 0 && fields[0] == "$" {
			fields = fields[1:]
		}
		for len(fields) > 0 && assignment.MatchString(fields[0]) {
			fields = fields[1:]
		}
		switch {
		case len(fields) == 0:
			continue
		case len(fields) > 2 && fields[0] == "go" && fields[1] == "run":
			out = append(out, command{path.Base(fields[2]), fields[3:]})
		case len(fields) > 2 && fields[0] == "go" && fields[1] == "tool":
			out = append(out, command{fields[2], fields[3:]})
		case strings.Contains(fields[0], "/") && !strings.HasPrefix(fields[0], ".") && !strings.HasPrefix(fields[0], "bin/"):
			continue // a path in a listing (cmd/craigctl), not a program run
		default:
			out = append(out, command{path.Base(fields[0]), fields[1:]})
		}
	}
	return out
}

func (f Facts) checkCommand(c command, report reporter) {
	switch {
	case c.prog == "craigctl":
		f.checkCraigctl(c.args, report)
	case c.prog == "mage":
		f.checkMage(c.args, report)
	case c.prog == "go" && len(c.args) > 0:
		for _, a := range c.args[1:] {
			if strings.HasPrefix(a, "./") {
				f.checkPath(a, report)
			}
		}
	case c.prog == "<svc>" || slices.Contains(f.Services, c.prog):
		f.checkService(c.args, report)
	}
}

// mageValueFlags are mage's flags that take a value.
var mageValueFlags = []string{"-t", "-d", "-w", "-gocmd", "-compile", "-goos", "-goarch", "-ldflags"}

// checkMage: the first argument that is no flag is a target, and so is
// every later one holding a colon (the others are a target's arguments).
func (f Facts) checkMage(args []string, report reporter) {
	first := true
	for i := 0; i < len(args); i++ {
		a := strings.TrimRight(args[i], ".,`")
		switch {
		case slices.Contains(mageValueFlags, a):
			i++
		case strings.HasPrefix(a, "-") || strings.HasPrefix(a, "#") || a == "":
		case first || strings.Contains(a, ":"):
			if !f.Mage[a] {
				report("target", a)
			}
			first = false
		}
	}
}

func (f Facts) checkCraigctl(args []string, report reporter) {
	path := "craigctl"
	i := 0
	for ; i < len(args); i++ {
		next := path + " " + args[i]
		if _, ok := f.Craigctl[next]; !ok {
			break
		}
		path = next
	}
	if i < len(args) && f.hasChildren(path) && word.MatchString(args[i]) {
		report("command", path+" "+args[i])
		return
	}
	for _, a := range args[i:] {
		if name, ok := flagName(a, true); ok && name != "help" && !slices.Contains(f.Craigctl[path], name) {
			report("flag", path+" "+strings.SplitN(a, "=", 2)[0])
		}
	}
}

// flagName is the flag a word names: --name or --name=value, and -x (a
// one-letter shorthand) when short is set; -name for a Go flag set.
func flagName(a string, short bool) (string, bool) {
	a = strings.TrimRight(strings.SplitN(a, "=", 2)[0], ".,`]")
	a = strings.TrimLeft(a, "[")
	switch {
	case strings.HasPrefix(a, "--") && len(a) > 2:
		return a[2:], true
	case strings.HasPrefix(a, "-") && len(a) > 1 && !strings.HasPrefix(a, "--"):
		if short && len(a) != 2 {
			return "", false // not a shorthand: an argument such as -1
		}
		return a[1:], word.MatchString(a[1:])
	}
	return "", false
}

func (f Facts) hasChildren(path string) bool {
	for p := range f.Craigctl {
		if strings.HasPrefix(p, path+" ") {
			return true
		}
	}
	return false
}

// checkService checks `<svc> VERB [flags]`: the verb must be a command of
// the service binary and each flag (-name or --name) one of its flags.
func (f Facts) checkService(args []string, report reporter) {
	if len(args) == 0 || !word.MatchString(args[0]) {
		return
	}
	verb, rest := args[0], args[1:]
	if verb == "archive" {
		verb = "archive run"
		if len(rest) > 0 && (rest[0] == "run" || rest[0] == "index-subjects") {
			verb, rest = "archive "+rest[0], rest[1:]
		}
	}
	flags, ok := f.Service[verb]
	if !ok {
		report("command", "<svc> "+verb)
		return
	}
	for _, a := range rest {
		if name, ok := flagName(a, false); ok && name != "help" && name != "h" && !slices.Contains(flags, name) {
			report("flag", "<svc> "+verb+" "+strings.SplitN(a, "=", 2)[0])
		}
	}
}
