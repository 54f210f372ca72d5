package subject

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
)

// boxText derives the sealing key from the subject key: a pending court
// order keeps its subject and salt sealed under it, never in clear.
const boxText = "craig-retention subject box v1"

// ErrBox: a sealed box that does not open under this key.
var ErrBox = errors.New("subject: the sealed value does not open under this key")

func (k Key) aead() (cipher.AEAD, error) {
	if !k.Valid() {
		return nil, fmt.Errorf("%w: none configured", ErrKey)
	}
	m := hmac.New(sha256.New, k.secret)
	m.Write([]byte(boxText))
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// Box seals plain under the key (AES-256-GCM with a key derived from it, a
// random nonce first): what a pending order must keep (the subject, the
// salt) and nobody without the key may read.
func (k Key) Box(plain []byte) ([]byte, error) {
	a, err := k.aead()
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, a.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return a.Seal(nonce, nonce, plain, nil), nil
}

// Unbox opens what Box sealed (ErrBox when it does not open).
func (k Key) Unbox(box []byte) ([]byte, error) {
	a, err := k.aead()
	if err != nil {
		return nil, err
	}
	if len(box) < a.NonceSize() {
		return nil, ErrBox
	}
	plain, err := a.Open(nil, box[:a.NonceSize()], box[a.NonceSize():], nil)
	if err != nil {
		return nil, ErrBox
	}
	return plain, nil
}

// SaltSize is the bytes of a court order's salt.
const SaltSize = 32

// commitmentText separates the commitment's input from any other hash.
const commitmentText = "craig-retention expungement commitment v1\x00"

// NewSalt returns a random salt for a commitment.
func NewSalt() ([]byte, error) {
	b := make([]byte, SaltSize)
	_, err := rand.Read(b)
	return b, err
}

// Commitment is SHA-256(domain ‖ salt ‖ canonical subject): it names the
// subject to whoever holds the salt (the court's file) and to nobody else,
// and the same salt and subject always give the same commitment.
func Commitment(salt []byte, s Subject) []byte {
	h := sha256.New()
	h.Write([]byte(commitmentText))
	h.Write(salt)
	h.Write([]byte(s.String()))
	return h.Sum(nil)
}
