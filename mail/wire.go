package mail

import (
	"context"
	"fmt"
	"net"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/retention"
)

// Wire plugs mailboxes into a server: it declares the retention of the
// mail tables in policies (they exist whether or not mail is on) and,
// unless cfg.Disabled is set, builds the service, registers its
// capabilities on reg and, when cfg.SMTPListen is set, binds the inbound
// SMTP listener (so its address is known before serving; StartSMTP
// serves it). The service and the listener are nil when mail is off.
func Wire(cfg Config, reg *capabilities.Registry, policies *retention.Set) (*Service, net.Listener, error) {
	if err := policies.Add(RetentionPolicies(cfg.Store.Bucket)...); err != nil {
		return nil, nil, err
	}
	if cfg.Disabled {
		return nil, nil, nil
	}
	svc, err := New(cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := reg.Register(svc.Capabilities()...); err != nil {
		return nil, nil, fmt.Errorf("register mail: %w", err)
	}
	var ln net.Listener
	if addr := cfg.SMTPListen; addr != "" {
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, nil, fmt.Errorf("smtp listen: %w", err)
		}
	}
	return svc, ln, nil
}

// StartSMTP serves the inbound SMTP listener ln in the background until
// the returned stop is called. A nil service or listener serves nothing.
func (s *Service) StartSMTP(ln net.Listener) (stop func()) {
	if s == nil || ln == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.log.Info("serving SMTP", "addr", ln.Addr().String(), "domain", s.opts.Domain)
		if err := s.Serve(ctx, ln); err != nil {
			s.log.Error("smtp listener stopped", "err", err)
		}
	}()
	return func() { cancel(); <-done }
}

// RelayTopics returns, keyed by topic, the outbox handlers of the mail the
// relay delivers: the platform's own (t) and, when mail is on (svc is not
// nil), the users' outbound mail.
func RelayTopics(t *Transactional, svc *Service) map[string]func(ctx context.Context, payload []byte) error {
	topics := map[string]func(ctx context.Context, payload []byte) error{TransactionalTopic: t.Handler()}
	if svc != nil {
		topics[OutboundTopic] = svc.OutboundHandler()
	}
	return topics
}
