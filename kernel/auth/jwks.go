package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
)

// jwk is the part of a JSON Web Key (RFC 7517/7518/8037) the verifier reads.
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Alg string `json:"alg"`
	Use string `json:"use"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// parseJWKS reads a JWK Set: every key needs a distinct kid; a key's alg,
// when given, must be the one its type verifies; keys for encryption are
// skipped.
func parseJWKS(b []byte) (map[string]verifyKey, error) {
	var set struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("not a JWK Set: %w", err)
	}
	out := map[string]verifyKey{}
	for i, k := range set.Keys {
		if k.Use == "enc" {
			continue
		}
		if k.Kid == "" {
			return nil, fmt.Errorf("key %d has no kid", i)
		}
		if _, dup := out[k.Kid]; dup {
			return nil, fmt.Errorf("kid %q listed twice", k.Kid)
		}
		pub, err := k.public()
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k.Kid, err)
		}
		vk, err := keyOf(pub)
		if err != nil {
			return nil, fmt.Errorf("key %q: %w", k.Kid, err)
		}
		if k.Alg != "" && k.Alg != vk.alg {
			return nil, fmt.Errorf("key %q: alg %s, its type verifies %s", k.Kid, k.Alg, vk.alg)
		}
		out[k.Kid] = vk
	}
	if len(out) == 0 {
		return nil, errors.New("no signature keys")
	}
	return out, nil
}

func (k jwk) public() (any, error) {
	b := func(s string) ([]byte, error) { return base64.RawURLEncoding.DecodeString(s) }
	switch k.Kty {
	case "RSA":
		n, err1 := b(k.N)
		e, err2 := b(k.E)
		if err := errors.Join(err1, err2); err != nil || len(n) == 0 || len(e) == 0 || len(e) > 4 {
			return nil, errors.New("RSA key needs base64url n and e")
		}
		return &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: int(new(big.Int).SetBytes(e).Int64())}, nil
	case "EC":
		x, err1 := b(k.X)
		y, err2 := b(k.Y)
		if err := errors.Join(err1, err2); err != nil || k.Crv != "P-256" || len(x) != 32 || len(y) != 32 {
			return nil, errors.New("EC key needs crv P-256 and 32-byte x and y")
		}
		pk, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), append(append([]byte{4}, x...), y...))
		if err != nil {
			return nil, errors.New("EC point not on the curve")
		}
		return pk, nil
	case "OKP":
		x, err := b(k.X)
		if err != nil || k.Crv != "Ed25519" || len(x) != ed25519.PublicKeySize {
			return nil, errors.New("OKP key needs crv Ed25519 and a 32-byte x")
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, fmt.Errorf("unsupported kty %q", k.Kty)
}
