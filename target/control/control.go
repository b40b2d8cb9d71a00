// Package control serves gonvmf's live control API: the gRPC service of controlpb
// (control.proto, the reference in controlpb/API.md) on a running target/server.Server,
// through which gonvmf ctl and orchestrators add and remove subsystems, namespaces, hosts
// and listeners, resize namespaces, set and rotate hosts' authentication keys, inspect
// controllers and statistics, and save the running configuration. Answers and logs
// never carry a host's secret (SaveConfig's YAML excepted).
//
//	c, err := control.Start(srv, cfg.Control, log) // Unix socket (mode 0600); TCP with mutual TLS when configured
//	...
//	c.Close()
//
// The service owns no state: every mutating RPC is one of the Server's operations (see
// target/server), which validates the change against the running configuration with the
// conf package and applies it whole or not at all, serialized with every other change and
// with a SIGHUP reload. Errors become gRPC status codes with the operation's message,
// which names the object and the reason.
//
// # Security
//
// The Unix socket is created mode 0600 in a directory created 0700: only its owner (the
// root user gonvmf serve runs as) can connect, and nothing else authenticates a client
// there. The TCP listener exists only when control.tcp is configured, and requires TLS 1.3
// with a client certificate signed by control.tls_client_ca.
//
// Dial is the client side, for gonvmf ctl and tests.
package control

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/reflection"

	"github.com/gonvmf/gonvmf/conf"
	pb "github.com/gonvmf/gonvmf/target/control/controlpb"
	"github.com/gonvmf/gonvmf/target/server"
)

// Server is the control API being served.
type Server struct {
	log    *slog.Logger
	socket string
	tcp    net.Addr
	grpcs  []*grpc.Server
	wg     sync.WaitGroup
	once   sync.Once
}

// Start serves the control API of srv as c describes (a resolved conf.Control): on the
// Unix socket c.Socket and, when c.TCP is set, on TCP with mutual TLS. A stale socket
// file (no one answers on it) is replaced; a socket a running gonvmf answers on is an
// error. On error nothing is left listening.
func Start(srv *server.Server, c conf.Control, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.Default()
	}
	cs := &Server{log: log.With("component", "control"), socket: c.Socket}
	svc := NewService(srv, log)
	ul, err := listenUnix(c.Socket)
	if err != nil {
		return nil, err
	}
	cs.serve(grpc.NewServer(), ul, svc)
	if c.TCP != "" {
		tc, err := serverTLS(c)
		if err != nil {
			cs.Close()
			return nil, err
		}
		tl, err := net.Listen("tcp", c.TCP)
		if err != nil {
			cs.Close()
			return nil, fmt.Errorf("control: tcp %s: %w", c.TCP, err)
		}
		cs.tcp = tl.Addr()
		cs.serve(grpc.NewServer(grpc.Creds(credentials.NewTLS(tc))), tl, svc)
	}
	cs.log.Info("control API listening", "socket", c.Socket, "tcp", c.TCP)
	return cs, nil
}

func (cs *Server) serve(g *grpc.Server, l net.Listener, svc *Service) {
	pb.RegisterControlServer(g, svc)
	reflection.Register(g) // grpcurl and other generic clients discover the API
	cs.grpcs = append(cs.grpcs, g)
	cs.wg.Add(1)
	go func() {
		defer cs.wg.Done()
		if err := g.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			cs.log.Error("control API stopped serving", "addr", l.Addr(), "err", err)
		}
	}()
}

// TCPAddr is the TCP address being served (nil without control.tcp).
func (cs *Server) TCPAddr() net.Addr { return cs.tcp }

// Close stops serving: every listener (the socket, and TCP) stops taking calls at once,
// and the RPCs in progress get up to 5 s in all to finish; the socket file is removed.
func (cs *Server) Close() error {
	cs.once.Do(func() {
		var stops sync.WaitGroup
		// One deadline for all: a context's Done is closed, so every waiter sees it (a
		// timer channel would tell only one of them).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, g := range cs.grpcs {
			stops.Add(1)
			go func() {
				defer stops.Done()
				done := make(chan struct{})
				go func() { g.GracefulStop(); close(done) }()
				select {
				case <-done:
				case <-ctx.Done():
					g.Stop()
				}
			}()
		}
		stops.Wait()
		cs.wg.Wait()
	})
	return nil
}

// fileKind names the kind of file mode is, with its article: "a regular file".
func fileKind(mode fs.FileMode) string {
	switch t := mode.Type(); {
	case t == 0:
		return "a regular file"
	case t&fs.ModeDir != 0:
		return "a directory"
	case t&fs.ModeSymlink != 0:
		return "a symbolic link"
	case t&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case t&fs.ModeCharDevice != 0:
		return "a character device"
	case t&fs.ModeDevice != 0:
		return "a block device"
	default:
		return "a file of mode " + t.String()
	}
}

// listenUnix creates the control socket at path, mode 0600 (its directory 0700 when it
// does not exist).
func listenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("control: socket %s: creating its directory: %w; set control.socket to a path in a writable directory", path, err)
		}
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("control: socket %s: %s is in the way; remove it or set control.socket elsewhere", path, fileKind(fi.Mode()))
		}
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("control: socket %s: another gonvmf is serving its control API there; stop it, or give this one its own control.socket", path)
		}
		// Only a refused connection says nobody listens: one that could not be made for
		// another reason (a full accept backlog: EAGAIN) may be a live target's.
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("control: socket %s: it may be another gonvmf's, serving its control API: connecting to it failed with %w, not refused; stop that gonvmf, or give this one its own control.socket", path, err)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("control: socket %s: removing the stale socket: %w", path, err)
		}
	}
	// The socket is bound in a directory of its own (0700), made 0600 there, and only
	// then renamed into place: bound at path, it would take the umask's mode, and a
	// process of another user could connect before the chmod (its connection would
	// outlive the chmod). Where the temporary path would not fit in sun_path, it is
	// bound at path with the umask tightened instead.
	tmp, err := os.MkdirTemp(dir, ".gs")
	if err != nil {
		return nil, fmt.Errorf("control: socket %s: %w; set control.socket to a path in a writable directory", path, err)
	}
	defer os.RemoveAll(tmp)
	bind := filepath.Join(tmp, "s")
	if len(bind) > conf.MaxSocketPathLength {
		bind = path
		defer syscall.Umask(syscall.Umask(0o177))
	}
	l, err := net.Listen("unix", bind)
	if err != nil {
		return nil, fmt.Errorf("control: socket %s: %w; set control.socket to a path in a writable directory", path, err)
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // bind may be renamed: unixListener removes path itself
	if err := os.Chmod(bind, 0o600); err != nil {
		l.Close()
		os.Remove(bind)
		return nil, fmt.Errorf("control: socket %s: %w", path, err)
	}
	if bind != path {
		if err := os.Rename(bind, path); err != nil {
			l.Close()
			return nil, fmt.Errorf("control: socket %s: moving it into place: %w", path, err)
		}
	}
	return &unixListener{UnixListener: ul, path: path}, nil
}

// unixListener is the control socket's listener: Close also removes the socket.
type unixListener struct {
	*net.UnixListener
	path string
}

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	os.Remove(l.path)
	return err
}

// serverTLS is the TCP listener's TLS: the server certificate, client certificates
// required and verified against the client CAs, TLS 1.3.
func serverTLS(c conf.Control) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("control: tls_cert %s, tls_key %s: %w", c.TLSCert, c.TLSKey, err)
	}
	pool, err := loadPool(c.TLSClientCA)
	if err != nil {
		return nil, fmt.Errorf("control: tls_client_ca: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// DialOptions say how to reach a control API: a Unix socket, or TCP with mutual TLS.
type DialOptions struct {
	// Socket is the Unix socket (default conf.DefaultControlSocket) when TCP is "".
	Socket string
	// TCP is address:port of a TCP control listener; it needs the three TLS files.
	TCP string
	// TLSCert and TLSKey are the client's certificate and key; TLSCA the CAs that sign
	// the server's certificate.
	TLSCert, TLSKey, TLSCA string
	// ServerName is the name the server's certificate must carry (default: TCP's host).
	ServerName string
}

// Dial connects to a control API and returns its client and the connection to close.
// For a Unix socket it first checks that the socket exists, so that a target that is not
// running is reported as such.
func Dial(o DialOptions) (pb.ControlClient, *grpc.ClientConn, error) {
	if o.TCP == "" {
		if o.Socket == "" {
			o.Socket = conf.DefaultControlSocket
		}
		abs, err := filepath.Abs(o.Socket)
		if err != nil {
			return nil, nil, err
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, nil, fmt.Errorf("control socket %s: %w (is gonvmf serve running? its control.socket names the socket)", abs, err)
		}
		cc, err := grpc.NewClient("unix://"+abs, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, nil, fmt.Errorf("control socket %s: %w", abs, err)
		}
		return pb.NewControlClient(cc), cc, nil
	}
	if o.TLSCert == "" || o.TLSKey == "" || o.TLSCA == "" {
		return nil, nil, errors.New("control over TCP needs a client certificate, its key and the CA of the server's certificate")
	}
	cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
	if err != nil {
		return nil, nil, fmt.Errorf("client certificate %s, key %s: %w", o.TLSCert, o.TLSKey, err)
	}
	pool, err := loadPool(o.TLSCA)
	if err != nil {
		return nil, nil, fmt.Errorf("server CA: %w", err)
	}
	name := o.ServerName
	if name == "" {
		if name, _, err = net.SplitHostPort(o.TCP); err != nil {
			return nil, nil, fmt.Errorf("control address %q: %w", o.TCP, err)
		}
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS13}
	cc, err := grpc.NewClient("passthrough:///"+o.TCP, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		return nil, nil, fmt.Errorf("control address %s: %w", o.TCP, err)
	}
	return pb.NewControlClient(cc), cc, nil
}
