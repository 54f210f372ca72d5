// Package eventsig makes events prove their sender: a producer signs each
// message body with its Ed25519 key (the signature and the key's id travel
// as AMQP headers), and a consumer holds the public key of each trusted
// producer together with the source service that key may speak for. The
// body is signed as published (the outbox message's JSON), so the
// signature covers the event id, type, payload and creation time.
//
// Key files: a producer's private key is a PEM "PRIVATE KEY" (PKCS #8,
// `openssl genpkey -algorithm ed25519`, or GeneratePEM); a consumer's trust
// file has one line per key, `<key id> <source service> <base64 public
// key>`, with '#' comments and blank lines allowed.
package eventsig

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
)

// The AMQP headers a signed message carries.
const (
	HeaderKeyID     = "x-craig-key-id"
	HeaderSignature = "x-craig-signature"
)

// maxKeyFileBytes bounds a key or trust file read at boot: a few keys are a
// few hundred bytes; a path pointing at something huge is a mistake.
const maxKeyFileBytes = 1 << 20

// Sentinels of a verification failure (errors.Is).
var (
	ErrUnsigned     = errors.New("eventsig: message is not signed")
	ErrUnknownKey   = errors.New("eventsig: signed with a key that is not trusted")
	ErrBadSignature = errors.New("eventsig: signature does not verify")
	ErrWrongSource  = errors.New("eventsig: key is not trusted for this source")
	ErrKeyFile      = errors.New("eventsig: invalid key file")
)

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

// Signer signs message bodies with one private key.
type Signer struct {
	keyID string
	key   ed25519.PrivateKey
}

// NewSigner returns a signer for key, announced as keyID.
func NewSigner(keyID string, key ed25519.PrivateKey) (*Signer, error) {
	if !keyIDPattern.MatchString(keyID) {
		return nil, fmt.Errorf("%w: key id %q: 1..64 of letters, digits and . _ : -", ErrKeyFile, keyID)
	}
	if len(key) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("%w: not an Ed25519 private key", ErrKeyFile)
	}
	return &Signer{keyID: keyID, key: key}, nil
}

// LoadSigner reads a PEM PKCS #8 Ed25519 private key from path. Its errors
// name the path, never the key's bytes.
func LoadSigner(keyID, path string) (*Signer, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: %s: no PEM \"PRIVATE KEY\" block", ErrKeyFile, path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: not a PKCS #8 private key", ErrKeyFile, path)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: %s: not an Ed25519 key (%T)", ErrKeyFile, path, k)
	}
	return NewSigner(keyID, priv)
}

// KeyID is the id the signer announces.
func (s *Signer) KeyID() string { return s.keyID }

// Headers returns the headers that sign body.
func (s *Signer) Headers(body []byte) map[string]any {
	return map[string]any{
		HeaderKeyID:     s.keyID,
		HeaderSignature: base64.StdEncoding.EncodeToString(ed25519.Sign(s.key, body)),
	}
}

// trusted is one producer key.
type trusted struct {
	source string
	key    ed25519.PublicKey
}

// Trust is the set of producer keys a consumer accepts.
type Trust struct {
	keys map[string]trusted
}

// LoadTrust reads a trust file (see the package comment).
func LoadTrust(path string) (*Trust, error) {
	b, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	t, err := ParseTrust(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ParseTrust parses trust lines: `<key id> <source service> <base64 key>`.
func ParseTrust(r io.Reader) (*Trust, error) {
	t := &Trust{keys: map[string]trusted{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			return nil, fmt.Errorf("%w: line %d: want `<key id> <source service> <base64 public key>`", ErrKeyFile, n)
		}
		if !keyIDPattern.MatchString(f[0]) {
			return nil, fmt.Errorf("%w: line %d: key id %q", ErrKeyFile, n, f[0])
		}
		if _, dup := t.keys[f[0]]; dup {
			return nil, fmt.Errorf("%w: line %d: key id %q listed twice", ErrKeyFile, n, f[0])
		}
		pub, err := base64.StdEncoding.DecodeString(f[2])
		if err != nil || len(pub) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("%w: line %d: not a base64 Ed25519 public key", ErrKeyFile, n)
		}
		t.keys[f[0]] = trusted{source: f[1], key: pub}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	if len(t.keys) == 0 {
		return nil, fmt.Errorf("%w: no keys", ErrKeyFile)
	}
	return t, nil
}

// Len is the number of trusted keys.
func (t *Trust) Len() int { return len(t.keys) }

// Verify checks that body is signed, per headers, by a trusted key that may
// speak for source. It returns the key id on success.
func (t *Trust) Verify(body []byte, headers map[string]any, source string) (string, error) {
	keyID, _ := headers[HeaderKeyID].(string)
	sig, _ := headers[HeaderSignature].(string)
	if keyID == "" || sig == "" {
		return "", ErrUnsigned
	}
	k, ok := t.keys[keyID]
	if !ok {
		return keyID, fmt.Errorf("%w: %q", ErrUnknownKey, keyID)
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || !ed25519.Verify(k.key, body, raw) {
		return keyID, fmt.Errorf("%w: key %q", ErrBadSignature, keyID)
	}
	if k.source != source {
		return keyID, fmt.Errorf("%w: key %q speaks for %q, the event claims %q", ErrWrongSource, keyID, k.source, source)
	}
	return keyID, nil
}

// GeneratePEM makes a new key pair: the private key as PEM PKCS #8 (for a
// producer's signing_key_file) and the trust line for a consumer.
func GeneratePEM(keyID, source string) (privatePEM []byte, trustLine string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, "", err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, "", err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), TrustLine(keyID, source, pub), nil
}

// TrustLine is the trust file line of a public key.
func TrustLine(keyID, source string, pub ed25519.PublicKey) string {
	return keyID + " " + source + " " + base64.StdEncoding.EncodeToString(pub)
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxKeyFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrKeyFile, path, err)
	}
	if len(b) > maxKeyFileBytes {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrKeyFile, path, maxKeyFileBytes)
	}
	return b, nil
}
