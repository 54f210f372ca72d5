package auth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/craig/retention/kernel/auth"
)

const secret = "0123456789abcdef0123456789abcdef-test"

func token(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims, header map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

func good() jwt.MapClaims {
	return jwt.MapClaims{"sub": "ops:alice", "exp": time.Now().Add(time.Hour).Unix(), "iss": "https://idp.craig", "aud": "craig-archive",
		"scope": "archive:read archive:purge"}
}

func with(c jwt.MapClaims, k string, v any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for kk, vv := range c {
		out[kk] = vv
	}
	if v == nil {
		delete(out, k)
	} else {
		out[k] = v
	}
	return out
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

func pemPublic(t *testing.T, pub any) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// TestAuthMatrix: none, malformed, expired, wrong key, alg none, HS256
// signed with the public key (alg confusion), wrong issuer and wrong
// audience are refused with their reasons; a good token yields its sub and
// scopes.
func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	pubPEM := pemPublic(t, &rsaKey.PublicKey)
	v, err := auth.NewVerifier(auth.Config{PublicKeyFile: writeFile(t, "pub.pem", pubPEM), Issuer: "https://idp.craig", Audience: "craig-archive"})
	require.NoError(t, err)
	require.Equal(t, []string{"RS256"}, v.Algorithms())
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)

	p, err := v.Verify(context.Background(), token(t, jwt.SigningMethodRS256, rsaKey, good(), nil))
	require.NoError(t, err)
	require.Equal(t, "ops:alice", p.Subject)
	require.True(t, p.Has(auth.ScopePurge))
	require.False(t, p.Has(auth.ScopeHold))

	noneTok, err := jwt.NewWithClaims(jwt.SigningMethodNone, good()).SignedString(jwt.UnsafeAllowNoneSignatureType)
	require.NoError(t, err)
	tests := []struct {
		name, raw, reason string
	}{
		{"malformed", "not.a.jwt", auth.ReasonMalformed},
		{"garbage", "abc", auth.ReasonMalformed},
		{"expired", token(t, jwt.SigningMethodRS256, rsaKey, with(good(), "exp", time.Now().Add(-2*time.Minute).Unix()), nil), auth.ReasonExpired},
		{"no exp", token(t, jwt.SigningMethodRS256, rsaKey, with(good(), "exp", nil), nil), auth.ReasonClaims},
		{"wrong key", token(t, jwt.SigningMethodRS256, other, good(), nil), auth.ReasonSignature},
		{"alg none", noneTok, auth.ReasonAlgorithm},
		{"HS256 with the public key", token(t, jwt.SigningMethodHS256, pubPEM, good(), nil), auth.ReasonAlgorithm},
		{"wrong issuer", token(t, jwt.SigningMethodRS256, rsaKey, with(good(), "iss", "https://evil"), nil), auth.ReasonIssuer},
		{"wrong audience", token(t, jwt.SigningMethodRS256, rsaKey, with(good(), "aud", "other"), nil), auth.ReasonAudience},
		{"no sub", token(t, jwt.SigningMethodRS256, rsaKey, with(good(), "sub", nil), nil), auth.ReasonClaims},
	}
	for _, tt := range tests {
		_, err := v.Verify(context.Background(), tt.raw)
		var ae *auth.Error
		require.True(t, errors.As(err, &ae), "%s: %v", tt.name, err)
		require.Equal(t, tt.reason, ae.Reason, "%s: %v", tt.name, err)
	}
	// Within the 60 s leeway an expired token still passes.
	_, err = v.Verify(context.Background(), token(t, jwt.SigningMethodRS256, rsaKey, with(good(), "exp", time.Now().Add(-30*time.Second).Unix()), nil))
	require.NoError(t, err)
}

// TestKeySources: an HS256 secret (inline or file), EC and Ed25519 PEM keys
// and a JWKS each verify exactly their algorithm; a JWKS token names its
// key by kid; a weak secret, two sources or a bad file are refused without
// showing the key.
func TestKeySources(t *testing.T) {
	t.Parallel()
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	edPub, edPriv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	b64 := base64.RawURLEncoding.EncodeToString
	point, err := ecKey.PublicKey.Bytes() // 0x04 || x || y
	require.NoError(t, err)
	jwks, err := json.Marshal(map[string]any{"keys": []map[string]any{
		{"kty": "EC", "kid": "ec-1", "crv": "P-256", "x": b64(point[1:33]), "y": b64(point[33:])},
		{"kty": "OKP", "kid": "ed-1", "crv": "Ed25519", "x": b64(edPub), "alg": "EdDSA"},
	}})
	require.NoError(t, err)
	cases := []struct {
		name   string
		cfg    auth.Config
		method jwt.SigningMethod
		key    any
		header map[string]any
	}{
		{"inline secret", auth.Config{HS256Secret: secret}, jwt.SigningMethodHS256, []byte(secret), nil},
		{"secret file", auth.Config{HS256SecretFile: writeFile(t, "s", []byte(secret+"\n"))}, jwt.SigningMethodHS256, []byte(secret), nil},
		{"EC PEM", auth.Config{PublicKeyFile: writeFile(t, "ec.pem", pemPublic(t, &ecKey.PublicKey))}, jwt.SigningMethodES256, ecKey, nil},
		{"Ed25519 PEM", auth.Config{PublicKeyFile: writeFile(t, "ed.pem", pemPublic(t, edPub))}, jwt.SigningMethodEdDSA, edPriv, nil},
		{"JWKS EC", auth.Config{JWKSFile: writeFile(t, "jwks", jwks)}, jwt.SigningMethodES256, ecKey, map[string]any{"kid": "ec-1"}},
		{"JWKS Ed25519", auth.Config{JWKSFile: writeFile(t, "jwks", jwks)}, jwt.SigningMethodEdDSA, edPriv, map[string]any{"kid": "ed-1"}},
	}
	for _, c := range cases {
		v, err := auth.NewVerifier(c.cfg)
		require.NoError(t, err, c.name)
		claims := with(with(good(), "iss", nil), "aud", nil)
		_, err = v.Verify(context.Background(), token(t, c.method, c.key, claims, c.header))
		require.NoError(t, err, c.name)
	}
	v, err := auth.NewVerifier(auth.Config{JWKSFile: writeFile(t, "jwks", jwks)})
	require.NoError(t, err)
	_, err = v.Verify(context.Background(), token(t, jwt.SigningMethodEdDSA, edPriv, good(), map[string]any{"kid": "ec-1"}))
	require.Error(t, err, "a token must be signed by the key its kid names, with that key's algorithm")
	_, err = v.Verify(context.Background(), token(t, jwt.SigningMethodEdDSA, edPriv, good(), map[string]any{"kid": "nope"}))
	require.Error(t, err)

	for name, c := range map[string]auth.Config{
		"short secret": {HS256Secret: "short"},
		"two sources":  {HS256Secret: secret, JWKSFile: "x"},
		"none":         {},
		"not PEM":      {PublicKeyFile: writeFile(t, "bad.pem", []byte("SECRET-MATERIAL"))},
		"bad JWKS":     {JWKSFile: writeFile(t, "bad.jwks", []byte(`{"keys":[{"kty":"RSA","kid":"r"}]}`))},
		"missing file": {PublicKeyFile: filepath.Join(t.TempDir(), "missing")},
	} {
		_, err := auth.NewVerifier(c)
		require.ErrorIs(t, err, auth.ErrKey, name)
		require.False(t, strings.Contains(err.Error(), "SECRET-MATERIAL") || strings.Contains(err.Error(), secret), name)
	}
}

// TestTokenClaimsStrict: an iat in the future
// (beyond the leeway), a string exp or iat, and a sub that could pass for
// another identity are refused as bad claims; a good one passes.
func TestTokenClaimsStrict(t *testing.T) {
	t.Parallel()
	v, err := auth.NewVerifier(auth.Config{HS256Secret: secret})
	require.NoError(t, err)
	future := time.Now().Add(time.Hour).Unix()
	for name, c := range map[string]jwt.MapClaims{
		"iat in the future":  with(good(), "iat", future),
		"string exp":         with(good(), "exp", strconv.FormatInt(future, 10)),
		"string iat":         with(good(), "iat", strconv.FormatInt(time.Now().Unix(), 10)),
		"sub trailing space": with(good(), "sub", "ops:alice "),
		"sub zero-width":     with(good(), "sub", "ops:al\u200bice"),
		"sub NFD":            with(good(), "sub", "ops:e\u0301ve"),
	} {
		_, err := v.Verify(context.Background(), token(t, jwt.SigningMethodHS256, []byte(secret), c, nil))
		require.Error(t, err, name)
	}
	p, err := v.Verify(context.Background(), token(t, jwt.SigningMethodHS256, []byte(secret), with(good(), "iat", time.Now().Unix()), nil))
	require.NoError(t, err)
	require.Equal(t, "ops:alice", p.Subject)
}
