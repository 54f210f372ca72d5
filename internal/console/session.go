package console

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Cookie names: the session (SameSite=Strict) and the sign-in in
// progress (SameSite=Lax, so that the provider's redirect back carries it).
const (
	sessionCookie = "craig_console"
	loginCookie   = "craig_console_login"
	// loginTTL bounds a sign-in in progress.
	loginTTL = 10 * time.Minute
	// maxLogins bounds the sign-ins in progress held in memory: an
	// agency's staff sign in a few at a time; a flood of unfinished ones
	// is refused rather than held.
	maxLogins = 10_000
)

// session is a signed-in person, kept server-side: the browser holds only
// a random id. The access token never leaves the console.
type session struct {
	subject, name string
	scopes        []string
	token         string
	expires       time.Time
	lastSeen      time.Time
	csrf          string
}

func (s *session) has(scope string) bool { return slices.Contains(s.scopes, scope) }

// login is a sign-in in progress: the PKCE verifier, nonce and page to
// return to, by the state sent to the provider.
type login struct {
	verifier, nonce, returnTo string
	created                   time.Time
}

// sessions are the console's sessions and sign-ins in progress.
type sessions struct {
	idle time.Duration
	now  func() time.Time
	// maxLogins bounds the sign-ins in progress (maxLogins by default).
	maxLogins int

	mu     sync.Mutex
	byID   map[string]*session
	logins map[string]login
}

func newSessions(idle time.Duration) *sessions {
	return &sessions{idle: idle, now: time.Now, maxLogins: maxLogins, byID: map[string]*session{}, logins: map[string]login{}}
}

func randomID() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// get is the request's live session; an idle or expired one is ended.
func (ss *sessions) get(r *http.Request) (*session, string, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, "", false
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s, ok := ss.byID[c.Value]
	if !ok {
		return nil, "", false
	}
	now := ss.now()
	if now.Sub(s.lastSeen) > ss.idle || now.After(s.expires) {
		delete(ss.byID, c.Value)
		return nil, "expired", false
	}
	s.lastSeen = now
	cp := *s
	return &cp, c.Value, true
}

func (ss *sessions) put(s *session) string {
	id := randomID()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s.lastSeen, s.csrf = ss.now(), randomID()
	ss.byID[id] = s
	return id
}

func (ss *sessions) end(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.byID, id)
}

func (ss *sessions) startLogin(l login) (string, bool) {
	state := randomID()
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := ss.now()
	if len(ss.logins) >= ss.maxLogins {
		for k, v := range ss.logins { // sign-ins never finished
			if now.Sub(v.created) > loginTTL {
				delete(ss.logins, k)
			}
		}
		if len(ss.logins) >= ss.maxLogins {
			return "", false
		}
	}
	l.created = now
	ss.logins[state] = l
	return state, true
}

func (ss *sessions) takeLogin(state string) (login, bool) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	l, ok := ss.logins[state]
	delete(ss.logins, state)
	if !ok || ss.now().Sub(l.created) > loginTTL {
		return login{}, false
	}
	return l, true
}

// csrfOK compares a form's token with the session's in constant time.
func csrfOK(s *session, got string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(s.csrf), []byte(got)) == 1
}
