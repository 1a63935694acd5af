package enclave

import (
	"context"
	"errors"
	"fmt"

	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/accounts/lifecycle"
	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/capabilities/audit"
	"github.com/enclave-mcp/enclave/capabilities/secrets"
	"github.com/enclave-mcp/enclave/internal/envelope"
	"github.com/enclave-mcp/enclave/mcp"
	"github.com/enclave-mcp/enclave/storage"
)

// assemble builds the domain services on the open store and registers the
// built-in capabilities and ownership surfaces.
func (s *Server) assemble(ctx context.Context) error {
	ring, err := envelope.Open(ctx, s.store.DB, s.store.Keeper)
	if err != nil {
		return err
	}
	auditKey, err := ring.NamedKey(ctx, "audit")
	if err != nil {
		return err
	}
	s.audit = audit.New(s.store, auditKey, s.log)

	acfg := s.cfg.Accounts
	if acfg.Logger == nil {
		acfg.Logger = s.log
	}
	if s.accounts, err = accounts.New(ctx, s.store, acfg); err != nil {
		return err
	}
	s.secrets = secrets.NewWithRing(s.store, ring)

	s.inventory = storage.NewInventory()
	if err := registerInventory(s.inventory); err != nil {
		return err
	}
	s.lifecycle = lifecycle.New(s.store, s.inventory, s.accounts, lifecycle.Options{Logger: s.log})

	s.registry = capabilities.NewRegistry(capabilities.Options{
		Auditor:  s.audit,
		AuditKey: auditKey,
		Quota:    s.cfg.Quota,
		Features: s.cfg.Features,
		Logger:   s.log,
	})
	owners := lifecycle.Owners(s.accounts)
	caps := append(s.secrets.Capabilities(secrets.OwnerOf(owners)), s.lifecycle.Capabilities(owners)...)
	caps = append(caps, s.audit.Capability())
	if err := s.registry.Register(caps...); err != nil {
		return fmt.Errorf("register built-in capabilities: %w", err)
	}

	mopts := s.cfg.MCP
	mopts.Registry, mopts.Loader, mopts.BaseURL = s.registry, s.accounts, s.cfg.BaseURL
	mopts.Verifier = s.cfg.TokenVerifier
	if mopts.Verifier == nil {
		mopts.Verifier = refuseTokens{}
	}
	if mopts.Logger == nil {
		mopts.Logger = s.log
	}
	if s.mcp, err = mcp.New(mopts); err != nil {
		return err
	}
	return nil
}

// refuseTokens is the verifier while no issuer is configured: every token
// is refused, so /mcp answers with the OAuth challenge.
type refuseTokens struct{}

func (refuseTokens) VerifyToken(context.Context, string) (mcp.TokenInfo, error) {
	return mcp.TokenInfo{}, mcp.ErrInvalidToken
}

// registerInventory records where enclave's own user-owned data lives. A
// test applies every migration and fails when an owned table is missing.
func registerInventory(inv *storage.Inventory) error {
	return errors.Join(
		lifecycle.RegisterInventory(inv), // users (first: deleted last), user_roles
		inv.AddTable(storage.Table{Name: "email_claims", KeyColumn: "email"}),
		inv.AddTable(storage.Table{Name: "password_setup_tokens", KeyColumn: "token_hash", SkipExport: true}),
		inv.AddTable(storage.Table{Name: "mail_tokens", KeyColumn: "token_hash", SkipExport: true}),
		secrets.RegisterInventory(inv),
	)
}
