package auth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/craig/retention/kernel/auth"
)

// FuzzVerify: any bearer string either verifies to a principal with a
// subject (only a token signed with the key can) or is refused with an
// auth.Error naming one of the reasons; never a panic.
func FuzzVerify(f *testing.F) {
	const secret = "fuzz-secret-0123456789abcdef0123456789"
	v, err := auth.NewVerifier(auth.Config{HS256Secret: secret})
	if err != nil {
		f.Fatal(err)
	}
	sign := func(m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
		s, err := jwt.NewWithClaims(m, claims).SignedString(key)
		if err != nil {
			f.Fatal(err)
		}
		return s
	}
	exp := time.Now().Add(time.Hour).Unix()
	f.Add(sign(jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "ops:alice", "scope": "archive:read", "exp": exp}))
	f.Add(sign(jwt.SigningMethodHS256, []byte("another-secret-0123456789abcdef012345"), jwt.MapClaims{"sub": "ops:alice", "exp": exp}))
	f.Add(sign(jwt.SigningMethodHS512, []byte(secret), jwt.MapClaims{"sub": "ops:alice", "exp": exp}))
	f.Add(sign(jwt.SigningMethodHS256, []byte(secret), jwt.MapClaims{"sub": "ops:alice"}))
	f.Add(sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, jwt.MapClaims{"sub": "ops:alice", "exp": exp}))
	f.Add("eyJhbGciOiJIUzI1NiJ9.e30.")
	f.Add("")
	reasons := map[string]bool{auth.ReasonMissing: true, auth.ReasonMalformed: true, auth.ReasonExpired: true, auth.ReasonSignature: true,
		auth.ReasonAlgorithm: true, auth.ReasonIssuer: true, auth.ReasonAudience: true, auth.ReasonClaims: true}
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := v.Verify(context.Background(), raw)
		if err != nil {
			var ae *auth.Error
			if !errors.As(err, &ae) || !reasons[ae.Reason] {
				t.Fatalf("a refusal without a known reason: %v", err)
			}
			return
		}
		if p.Subject == "" {
			t.Fatalf("verified a token without a subject: %q", raw)
		}
		if _, err := jwt.Parse(raw, func(*jwt.Token) (any, error) { return []byte(secret), nil }, jwt.WithValidMethods([]string{"HS256"})); err != nil {
			t.Fatalf("verified a token the key did not sign: %q: %v", raw, err)
		}
	})
}
