package faults

import (
	"net"
	"sync"
)

// TCPProxy forwards TCP connections to a target (the database) and can
// freeze them: while frozen no byte moves in either direction and no
// connection is closed, like a server or a network that stops answering.
type TCPProxy struct {
	Addr   string
	target string
	ln     net.Listener
	mu     sync.Mutex
	frozen bool
	thawed chan struct{}
	conns  []net.Conn
}

// NewTCPProxy listens on a loopback port and forwards to target.
func NewTCPProxy(target string) (*TCPProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &TCPProxy{Addr: ln.Addr().String(), target: target, ln: ln, thawed: make(chan struct{})}
	close(p.thawed)
	go p.accept()
	return p, nil
}

func (p *TCPProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go p.pipe(s, c)
		go p.pipe(c, s)
	}
}

// pipe copies src to dst, waiting before each write while frozen.
func (p *TCPProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.thawed
			p.mu.Unlock()
			<-gate
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or a broken socket: pass the close on
			_ = dst.Close()
			return
		}
	}
}

// Freeze stops every byte until Thaw.
func (p *TCPProxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.frozen {
		p.frozen, p.thawed = true, make(chan struct{})
	}
}

// Thaw lets the bytes move again.
func (p *TCPProxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thawed)
	}
}

// Close thaws, stops accepting and closes every connection.
func (p *TCPProxy) Close() error {
	p.Thaw()
	err := p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	return err
}
