package accounts

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/enclave-mcp/enclave/capabilities"
)

// purposePasskeyProof names the ceremony of a passkey assertion that
// proves a factor to an action of the signed-in person (see FactorProof).
const purposePasskeyProof = "passkey_proof"

// FactorProof is a fresh proof of one of an account's second factors, for
// an action that changes its sign-in security or makes a credential (adding
// a factor, new recovery codes, a workspace API key): the password alone
// is what a borrowed session or a phished password gives, and it must not
// be enough to add a factor of the borrower's own. One of the two:
//
//   - Code: a code from the authenticator app (never one used before) or an
//     unused recovery code (spent);
//   - PasskeyToken and PasskeyCredential: the token of BeginPasskeyProof
//     and the assertion the browser made for it with one of the account's
//     passkeys (user verification required).
type FactorProof struct {
	Code              string          `json:"code,omitempty"`
	PasskeyToken      string          `json:"passkeyToken,omitempty"`
	PasskeyCredential json.RawMessage `json:"passkeyCredential,omitempty"`
}

// Empty reports whether p carries no proof at all.
func (p FactorProof) Empty() bool {
	return strings.TrimSpace(p.Code) == "" && p.PasskeyToken == ""
}

// ProveFactor checks p against u's second factors. An account without a
// second factor needs no proof (nil). Otherwise: ErrFactorProofRequired
// when p is empty, ErrSecondFactorInvalid for a wrong or used code,
// ErrPasskeyInvalid for an assertion that does not verify. A code or a
// passkey ceremony is used up by the check, right or wrong.
func (s *SecondFactors) ProveFactor(ctx context.Context, u User, p FactorProof) error {
	has, err := s.HasSecondFactor(ctx, u.ID)
	if err != nil {
		return err
	}
	if !has {
		return nil
	}
	switch {
	case p.PasskeyToken != "":
		return s.finishPasskeyProof(ctx, u, p.PasskeyToken, p.PasskeyCredential)
	case strings.TrimSpace(p.Code) != "":
		_, err := s.VerifySecondFactorCode(ctx, u, p.Code)
		return err
	}
	return ErrFactorProofRequired
}

// Reauthenticate checks, for an action of the signed-in person that needs
// more than a session, the current password and, when the account has a
// second factor, a fresh proof of one (ProveFactor). The password is
// checked first: a wrong one spends no code. Errors: ErrInvalidCredentials
// and those of ProveFactor.
func (s *SecondFactors) Reauthenticate(ctx context.Context, u User, password string, p FactorProof) error {
	if _, err := s.credentials.VerifyPassword(ctx, u.ID, password); err != nil {
		return fmt.Errorf("accounts: reauthenticate: %w", err)
	}
	if err := s.ProveFactor(ctx, u, p); err != nil {
		return fmt.Errorf("accounts: reauthenticate: %w", err)
	}
	return nil
}

// ReauthenticateCaller is Reauthenticate for the account of a capability's
// caller, with the errors a capability returns (sentences for the person;
// a wrong password says so, as the caller is signed in).
func (s *SecondFactors) ReauthenticateCaller(ctx context.Context, c capabilities.Caller, password string, p FactorProof) error {
	u, err := s.callerUser(ctx, c)
	if err != nil {
		return err
	}
	return reauthError(s.Reauthenticate(ctx, u, password, p))
}

// errWrongCurrentPassword is the message of a wrong current password, for
// someone who is signed in (never "invalid email or password").
const errWrongCurrentPassword = "Your current password is not correct."

// reauthError maps the errors of Reauthenticate to capability errors.
func reauthError(err error) error {
	if errors.Is(err, ErrInvalidCredentials) {
		return &capabilities.Error{Code: capabilities.CodeInvalidInput, Message: errWrongCurrentPassword, Err: err}
	}
	return capabilityError(err)
}

// BeginPasskeyProof starts an assertion with one of u's passkeys (user
// verification required), whose answer proves the factor to an action
// (FactorProof). The token is single use and expires in five minutes.
// ErrPasskeyInvalid when u has no passkey.
func (s *SecondFactors) BeginPasskeyProof(ctx context.Context, u User) (PasskeyCeremony, error) {
	if err := u.CheckActive(); err != nil {
		return PasskeyCeremony{}, err
	}
	wa, err := s.relyingParty()
	if err != nil {
		return PasskeyCeremony{}, err
	}
	w, err := s.waUserOf(ctx, u)
	if err != nil {
		return PasskeyCeremony{}, err
	}
	if len(w.creds) == 0 {
		return PasskeyCeremony{}, ErrPasskeyInvalid
	}
	assertion, session, err := wa.BeginLogin(w, webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		return PasskeyCeremony{}, fmt.Errorf("accounts: begin passkey proof: %w", err)
	}
	return s.storeCeremony(ctx, &u.ID, purposePasskeyProof, assertion, session)
}

// ProvePasskey checks the assertion the browser made for u's proof
// ceremony token (BeginPasskeyProof): one of u's passkeys signed it, with
// user verification. Unlike ProveFactor it never passes an account
// without a second factor: it is the proof that the person holds the
// account (linking a sign-in identity to it), not an extra factor.
// ErrPasskeyInvalid when it does not verify; the ceremony is used up.
func (s *SecondFactors) ProvePasskey(ctx context.Context, u User, token string, response []byte) error {
	if token == "" {
		return ErrPasskeyInvalid
	}
	return s.finishPasskeyProof(ctx, u, token, response)
}

// finishPasskeyProof checks the assertion of u's proof ceremony token.
func (s *SecondFactors) finishPasskeyProof(ctx context.Context, u User, token string, response []byte) error {
	if len(response) == 0 || len(response) > maxCredentialJSONLength {
		return ErrPasskeyInvalid
	}
	wa, err := s.relyingParty()
	if err != nil {
		return err
	}
	session, err := s.takeCeremony(ctx, token, purposePasskeyProof, u.ID)
	if err != nil {
		return err
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes(response)
	if err != nil {
		return ErrPasskeyInvalid
	}
	w, err := s.waUserOf(ctx, u)
	if err != nil {
		return err
	}
	cred, err := wa.ValidateLogin(w, session, parsed)
	if err != nil {
		s.cfg.Logger.InfoContext(ctx, "accounts: passkey proof refused", "user_id", u.ID, "error", err)
		return ErrPasskeyInvalid
	}
	_, err = s.passkeyUsed(ctx, u, cred)
	return err
}
