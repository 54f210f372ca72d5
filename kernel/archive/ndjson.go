package archive

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
)

// NDJSON is an archive's data object read straight from its rows' documents:
// each document followed by a newline, without copying them into one buffer.
// Holding the documents once instead of twice (the rows and their NDJSON) is
// what keeps a batch's memory at max_batch_bytes. It is
// an io.ReadSeeker (the store client rewinds it to retry a request); it is
// not safe for concurrent use.
type NDJSON struct {
	lines []string
	size  int64
	off   int64 // read position
	i     int   // line of off
	in    int64 // offset of off within line i (len(line) = the newline)
}

// NewNDJSON returns the NDJSON of rows' documents, in order.
func NewNDJSON(rows []Row) *NDJSON {
	n := &NDJSON{lines: make([]string, len(rows))}
	for i, r := range rows {
		n.lines[i] = r.Doc
		n.size += int64(len(r.Doc)) + 1
	}
	return n
}

// Size is the object's length in bytes.
func (n *NDJSON) Size() int64 { return n.size }

// Read implements io.Reader.
func (n *NDJSON) Read(p []byte) (int, error) {
	if n.off >= n.size {
		return 0, io.EOF
	}
	w := 0
	for w < len(p) && n.i < len(n.lines) {
		line := n.lines[n.i]
		if n.in < int64(len(line)) {
			c := copy(p[w:], line[n.in:])
			w += c
			n.in += int64(c)
			continue
		}
		p[w] = '\n'
		w++
		n.i, n.in = n.i+1, 0
	}
	n.off += int64(w)
	return w, nil
}

// ErrSeek is returned for a seek before the start.
var ErrSeek = errors.New("archive: ndjson: negative position")

// Seek implements io.Seeker.
func (n *NDJSON) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = n.off + offset
	case io.SeekEnd:
		abs = n.size + offset
	default:
		return n.off, errors.New("archive: ndjson: bad whence")
	}
	if abs < 0 {
		return n.off, ErrSeek
	}
	n.off, n.i, n.in = abs, 0, 0
	rest := min(abs, n.size)
	for n.i < len(n.lines) && rest >= int64(len(n.lines[n.i]))+1 {
		rest -= int64(len(n.lines[n.i])) + 1
		n.i++
	}
	n.in = rest
	return abs, nil
}

// hashBufferBytes is the buffer SHA256Hex streams the object through:
// large enough that the hash sees few calls, small beside a batch.
const hashBufferBytes = 64 << 10

// SHA256Hex is the lower-case hex sha256 of the whole object; it leaves
// the read position at the start. The lines are streamed through one
// buffer: a hash.Hash takes []byte, and converting each line would copy
// (and allocate) the whole batch once more (measured: 70% of the hash's
// CPU at 1,000 rows of 1.3 KB).
func (n *NDJSON) SHA256Hex() string {
	h := sha256.New()
	_, _ = n.Seek(0, io.SeekStart)
	_, _ = io.CopyBuffer(h, n, make([]byte, hashBufferBytes)) // reading lines and hashing never fail
	_, _ = n.Seek(0, io.SeekStart)
	return hex.EncodeToString(h.Sum(nil))
}
