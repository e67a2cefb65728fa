package console

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// http2Preface opens every HTTP/2 connection, so every gRPC one: a
// browser speaking HTTP/1.1 in the clear never sends it.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// sniffTimeout bounds how long a new connection may take to send the
// bytes that tell gRPC from HTTP/1.
const sniffTimeout = 10 * time.Second

// Split shares one plaintext listener between gRPC and the console: a
// connection that opens with the HTTP/2 preface goes to the first
// listener returned, any other to the second. Closing either closes lis.
// It does not work under TLS (the bytes are a handshake), so a TLS admin
// listener cannot share: give the console its own.
func Split(lis net.Listener) (grpcLis, httpLis net.Listener) {
	s := &splitter{base: lis, done: make(chan struct{})}
	g := &subListener{s: s, conns: make(chan net.Conn)}
	h := &subListener{s: s, conns: make(chan net.Conn)}
	go s.accept(g, h)
	return g, h
}

type splitter struct {
	base      net.Listener
	closeOnce sync.Once
	done      chan struct{}
	err       error // why accept stopped; read after done
}

func (s *splitter) close() error {
	var err error
	s.closeOnce.Do(func() { err = s.base.Close() })
	return err
}

func (s *splitter) accept(g, h *subListener) {
	defer close(s.done)
	for {
		conn, err := s.base.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.err = err
			return
		}
		go s.route(conn, g, h)
	}
}

// route reads until the first bytes match or leave the preface, then
// hands the connection, with those bytes put back, to its listener.
func (s *splitter) route(conn net.Conn, g, h *subListener) {
	_ = conn.SetReadDeadline(time.Now().Add(sniffTimeout))
	buf := make([]byte, 0, len(http2Preface))
	isGRPC := false
	for len(buf) < len(http2Preface) {
		n, err := conn.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if !bytes.HasPrefix([]byte(http2Preface), buf) {
			break
		}
		if err != nil {
			_ = conn.Close()
			return
		}
		isGRPC = len(buf) == len(http2Preface)
	}
	_ = conn.SetReadDeadline(time.Time{})
	to := h
	if isGRPC {
		to = g
	}
	select {
	case to.conns <- &prefixConn{Conn: conn, prefix: buf}:
	case <-s.done:
		_ = conn.Close()
	}
}

type subListener struct {
	s     *splitter
	conns chan net.Conn
}

func (l *subListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.s.done:
		if l.s.err != nil {
			return nil, l.s.err
		}
		return nil, net.ErrClosed
	}
}

func (l *subListener) Close() error   { return l.s.close() }
func (l *subListener) Addr() net.Addr { return l.s.base.Addr() }

// prefixConn replays the bytes read while sniffing.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// PipeListener is an in-process listener: Dial connects to it through
// net.Pipe, with no port and no network. The console reaches the admin
// API's gRPC server through one, so that its calls pass the same
// authorization as any other client's.
type PipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

// NewPipeListener returns an open PipeListener.
func NewPipeListener() *PipeListener {
	return &PipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for a Dial.
func (l *PipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and Dial.
func (l *PipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr names the listener.
func (l *PipeListener) Addr() net.Addr { return pipeAddr{} }

// Dial connects to the listener; it has grpc.WithContextDialer's shape.
func (l *PipeListener) Dial(ctx context.Context, _ string) (net.Conn, error) {
	server, client := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "in-process" }
