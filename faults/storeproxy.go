package faults

import (
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Store fault kinds the proxy injects.
const (
	Fault500      = "500"       // 500 InternalError
	Fault503      = "503"       // 503 SlowDown
	Fault412      = "412"       // 412 PreconditionFailed on every create-only put
	FaultLatency  = "latency"   // every request waits FaultDelay first, then passes
	FaultReset    = "reset"     // the connection is closed mid-body
	FaultHang     = "hang"      // the request is never answered
	FaultSlowBody = "slow_body" // the answer trickles in small chunks
	FaultNone     = ""          // pass everything
	FaultDelay    = 150 * time.Millisecond
	trickleChunk  = 512
	trickleGap    = 2 * time.Millisecond
	errorBodyS3   = `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected by the fault suite</Message></Error>`
)

// StoreProxy is an HTTP proxy in front of the real S3 server that injects
// one fault kind into the requests it matches (object PUTs and GETs after
// the first Skip of them), counting each injection.
type StoreProxy struct {
	URL      string // http://127.0.0.1:port: the endpoint to give the store
	srv      *http.Server
	rp       *httputil.ReverseProxy
	mu       sync.Mutex
	kind     string
	skip     int64
	seen     atomic.Int64
	injected atomic.Int64
	hung     chan struct{}
}

// NewStoreProxy starts a proxy to the S3 server at target.
func NewStoreProxy(target string) (*StoreProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &StoreProxy{URL: "http://" + ln.Addr().String(), hung: make(chan struct{})}
	p.rp = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(u)
		r.Out.Host = r.In.Host // the client signed this Host (SigV4)
	}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Close stops the proxy and releases hung requests.
func (p *StoreProxy) Close() error {
	close(p.hung)
	return p.srv.Close()
}

// Set arms kind for every matched request after the first skip of them
// (FaultNone: pass everything).
func (p *StoreProxy) Set(kind string, skip int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kind, p.skip = kind, int64(skip)
	p.seen.Store(0)
}

// Injected counts the requests a fault was injected into.
func (p *StoreProxy) Injected() int64 { return p.injected.Load() }

// matched: object writes and reads of archive keys (not the bucket-level
// calls: versioning, Object Lock, listing).
func matched(r *http.Request) bool {
	if r.URL.RawQuery != "" && !strings.Contains(r.URL.RawQuery, "x-id=") {
		return false
	}
	return (r.Method == http.MethodPut || r.Method == http.MethodGet) && strings.Count(strings.Trim(r.URL.Path, "/"), "/") >= 2
}

func (p *StoreProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	kind, skip := p.kind, p.skip
	p.mu.Unlock()
	if kind == FaultNone || !matched(r) || p.seen.Add(1) <= skip {
		p.rp.ServeHTTP(w, r)
		return
	}
	if kind == Fault412 && (r.Method != http.MethodPut || r.Header.Get("If-None-Match") == "") {
		p.rp.ServeHTTP(w, r)
		return
	}
	p.injected.Add(1)
	switch kind {
	case Fault500:
		s3Error(w, http.StatusInternalServerError, "InternalError")
	case Fault503:
		s3Error(w, http.StatusServiceUnavailable, "SlowDown")
	case Fault412:
		s3Error(w, http.StatusPreconditionFailed, "PreconditionFailed")
	case FaultLatency:
		time.Sleep(FaultDelay)
		p.rp.ServeHTTP(w, r)
	case FaultReset:
		p.reset(w, r)
	case FaultHang:
		select {
		case <-r.Context().Done():
		case <-p.hung:
		}
	case FaultSlowBody:
		if r.Method == http.MethodPut {
			r.Body = &slowReader{r: r.Body}
		}
		p.rp.ServeHTTP(&trickle{ResponseWriter: w}, r)
	}
}

func s3Error(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, strings.Replace(errorBodyS3, "%s", code, 1))
}

// reset reads part of a PUT's body, or sends a GET's headers and part of
// its body, then drops the connection.
func (p *StoreProxy) reset(w http.ResponseWriter, r *http.Request) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		return
	}
	if r.Method == http.MethodPut {
		_, _ = io.CopyN(io.Discard, r.Body, 1024)
		conn, _, err := hj.Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	conn, buf, err := hj.Hijack()
	if err != nil {
		return
	}
	_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("x", 1000))
	_ = buf.Flush()
	_ = conn.Close()
}

// trickle writes the answer in small chunks with a pause between them.
type trickle struct{ http.ResponseWriter }

func (t *trickle) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		c := min(len(b), trickleChunk)
		m, err := t.ResponseWriter.Write(b[:c])
		n += m
		if err != nil {
			return n, err
		}
		if f, ok := t.ResponseWriter.(http.Flusher); ok {
			f.Flush()
		}
		b = b[c:]
		time.Sleep(trickleGap)
	}
	return n, nil
}

// slowReader reads a request body in small chunks with a pause between.
type slowReader struct{ r io.ReadCloser }

func (s *slowReader) Read(b []byte) (int, error) {
	time.Sleep(trickleGap)
	return s.r.Read(b[:min(len(b), trickleChunk)])
}

func (s *slowReader) Close() error { return s.r.Close() }
