package craigctl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// ErrRefused is wrapped by a destructive command the operator did not
// confirm (exit 4; nothing was done).
var ErrRefused = errors.New("refused: nothing was done")

// confirm shows what a destructive command will do and asks the operator
// to type yes. --yes skips the question; without it, a stdin that is not a
// terminal, end of input or any other answer refuses. The plan is shown
// either way, on stderr.
func (o *options) confirm(ctx context.Context, yes bool, plan string) error {
	_, _ = fmt.Fprintln(o.io.Err, plan)
	if yes {
		return nil
	}
	if !o.io.InTerminal {
		return &ExitError{Code: ExitRefused, Err: fmt.Errorf("%w (stdin is not a terminal: pass --yes to confirm non-interactively)", ErrRefused)}
	}
	_, _ = fmt.Fprint(o.io.Err, "Type yes to continue: ")
	type answer struct {
		line string
		err  error
	}
	got := make(chan answer, 1) // the read may outlive an interrupt; it never blocks its sender
	go func() {
		line, err := bufio.NewReader(o.io.In).ReadString('\n')
		got <- answer{line, err}
	}()
	var line string
	select {
	case <-ctx.Done():
		return &ExitError{Code: ExitRefused, Err: fmt.Errorf("%w (interrupted)", ErrRefused)}
	case a := <-got:
		if a.err != nil {
			return &ExitError{Code: ExitRefused, Err: fmt.Errorf("%w (no answer)", ErrRefused)}
		}
		line = a.line
	}
	if strings.TrimRight(line, "\r\n") != "yes" {
		return &ExitError{Code: ExitRefused, Err: fmt.Errorf("%w (the answer was not yes)", ErrRefused)}
	}
	return nil
}

// progress is drawn on a terminal's stderr, never with --json or when
// piped; every method is a no-op when it is not drawn.
type progress struct {
	bar  *progressbar.ProgressBar
	stop chan struct{}
	wg   sync.WaitGroup
}

// spinnerTick is how often a waiting spinner is redrawn.
const spinnerTick = 150 * time.Millisecond

// spinner starts an indeterminate progress line counting unit; it is
// redrawn while a call is waited for.
func (o *options) spinner(what, unit string) *progress {
	p := &progress{}
	if o.json || !o.io.ErrTerminal {
		return p
	}
	p.bar = progressbar.NewOptions64(-1, progressbar.OptionSetWriter(o.io.Err), progressbar.OptionSetDescription(what),
		progressbar.OptionSpinnerType(14), progressbar.OptionSetElapsedTime(true), progressbar.OptionShowCount(),
		progressbar.OptionSetItsString(unit), progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish())
	p.stop = make(chan struct{})
	p.wg.Go(func() {
		t := time.NewTicker(spinnerTick)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				_ = p.bar.Add(0)
			}
		}
	})
	return p
}

func (p *progress) add(n int) {
	if p.bar != nil {
		_ = p.bar.Add(n)
	}
}

func (p *progress) done() {
	if p.bar == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	_ = p.bar.Finish()
}
