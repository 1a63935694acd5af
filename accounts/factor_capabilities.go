package accounts

import (
	"context"
	"encoding/json"

	"github.com/enclave-mcp/enclave/capabilities"
)

// FactorChange names a change of an account's second factors, for mail and
// the audit log.
type FactorChange string

// The factor changes.
const (
	FactorTOTPEnabled             FactorChange = "totp_enabled"
	FactorTOTPDisabled            FactorChange = "totp_disabled"
	FactorRecoveryCodesReset      FactorChange = "recovery_codes_reset"
	FactorPasskeyAdded            FactorChange = "passkey_added"
	FactorPasskeyRenamed          FactorChange = "passkey_renamed"
	FactorPasskeyRemoved          FactorChange = "passkey_removed"
	FactorsClearedByPasswordReset FactorChange = "factors_cleared_by_reset"
)

// FactorNotifier is told of every change of an account's second factors
// (mail.AccountMail mails the account). It runs after the change committed.
type FactorNotifier interface {
	FactorChanged(ctx context.Context, u User, change FactorChange)
}

// TOTPBeginOutput is the output of accountTOTPBegin.
type TOTPBeginOutput = TOTPEnrolment

// TOTPConfirmInput is the input of accountTOTPConfirm.
type TOTPConfirmInput struct {
	Code string `json:"code" jsonschema:"the 6-digit code the authenticator app shows"`
}

// RecoveryCodesOutput carries a new set of recovery codes, shown once.
type RecoveryCodesOutput struct {
	RecoveryCodes []string `json:"recoveryCodes"`
}

// TOTPDisableInput is the input of accountTOTPDisable.
type TOTPDisableInput struct {
	Password string `json:"password" jsonschema:"the current password"`
	Code     string `json:"code" jsonschema:"a code from the authenticator app, or a recovery code"`
}

// PasswordInput is the input of the capabilities that add to an account's
// sign-in security (accountTOTPBegin, accountPasskeyRegisterBegin,
// accountRecoveryCodesReset): the current password and, when the account
// already has a second factor, a fresh proof of one (see FactorProof):
// Code, or PasskeyToken with PasskeyCredential.
type PasswordInput struct {
	Password          string         `json:"password" jsonschema:"the current password"`
	Code              string         `json:"code,omitempty" jsonschema:"when the account has a second factor: a code from the authenticator app, or a recovery code"`
	PasskeyToken      string         `json:"passkeyToken,omitempty" jsonschema:"instead of code: the token of accountPasskeyProofBegin"`
	PasskeyCredential map[string]any `json:"passkeyCredential,omitempty" jsonschema:"with passkeyToken: the PublicKeyCredential the browser returned, as JSON"`
}

// Proof returns the factor proof in.
func (in PasswordInput) Proof() FactorProof {
	p := FactorProof{Code: in.Code, PasskeyToken: in.PasskeyToken}
	if in.PasskeyCredential != nil {
		p.PasskeyCredential, _ = json.Marshal(in.PasskeyCredential)
	}
	return p
}

// PasskeyRegisterInput is the input of accountPasskeyRegister.
type PasskeyRegisterInput struct {
	Token      string         `json:"token" jsonschema:"the token of accountPasskeyRegisterBegin"`
	Name       string         `json:"name" jsonschema:"a name for the passkey"`
	Credential map[string]any `json:"credential" jsonschema:"the PublicKeyCredential the browser created, as JSON"`
}

// PasskeyRenameInput is the input of accountPasskeyRename.
type PasskeyRenameInput struct {
	ID   int64  `json:"id" jsonschema:"the passkey's id, from accountFactors"`
	Name string `json:"name" jsonschema:"the passkey's new name"`
}

// PasskeyRemoveInput is the input of accountPasskeyRemove: the passkey and
// the current password (a borrowed session must not strip the account's
// factors).
type PasskeyRemoveInput struct {
	ID       int64  `json:"id" jsonschema:"the passkey's id, from accountFactors"`
	Password string `json:"password" jsonschema:"the current password"`
}

// DoneOutput is the output of a capability that only acts.
type DoneOutput struct {
	Done bool `json:"done"`
}

// FactorCapabilities returns the capabilities that manage the signed-in
// person's second factors: reading them, setting up and turning off an
// authenticator app, resetting recovery codes, and registering, renaming
// and removing passkeys. They are session-only (a person at the web
// shell; never an agent). Adding a factor and resetting recovery codes
// take the password and, when the account has a second factor, a fresh
// proof of one (FactorProof; accountPasskeyProofBegin starts a passkey's). Removing a factor and resetting recovery codes
// end every other browser session and OAuth grant, as a password change
// does. notify, when set, is told of every change.
func (s *Service) FactorCapabilities(issuer string, notify FactorNotifier) []capabilities.Capability {
	own := capabilities.Requirement{
		Permissions: []capabilities.Permission{capabilities.UpdateUserOwn},
		SessionOnly: true, InteractiveOnly: true,
	}
	tell := func(ctx context.Context, u User, c FactorChange) {
		if notify != nil {
			notify.FactorChanged(ctx, u, c)
		}
	}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[struct{}, Factors]{
			Name: "accountFactors", Domain: "account", Title: "List second factors",
			Description: "Lists the signed-in person's second factors: whether an authenticator app is set up, how many recovery codes are left, and the passkeys (names and dates, never key material).",
			Annotations: &capabilities.Annotations{ReadOnly: true},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (Factors, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return Factors{}, err
				}
				return s.SecondFactors.FactorsOf(ctx, u.ID)
			},
		}),
		capabilities.Define(capabilities.Spec[PasswordInput, TOTPBeginOutput]{
			Name: "accountTOTPBegin", Domain: "account", Title: "Start setting up an authenticator app",
			Description: "Makes a new authenticator-app secret for the signed-in person after checking the password and, when the account has a passkey, a proof of it (replacing an unfinished set-up). It works only after accountTOTPConfirm with a code from the app.",
			Annotations: &capabilities.Annotations{},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, in PasswordInput) (TOTPBeginOutput, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return TOTPBeginOutput{}, err
				}
				// A borrowed session or a phished password must not be able to
				// add a factor: the password, and a proof of a factor the
				// account has (a passkey) when it has one.
				if err := s.SecondFactors.Reauthenticate(ctx, u, in.Password, in.Proof()); err != nil {
					return TOTPBeginOutput{}, reauthError(err)
				}
				e, err := s.SecondFactors.BeginTOTP(ctx, u, issuer)
				return e, capabilityError(err)
			},
		}),
		capabilities.Define(capabilities.Spec[TOTPConfirmInput, RecoveryCodesOutput]{
			Name: "accountTOTPConfirm", Domain: "account", Title: "Finish setting up an authenticator app",
			Description: "Turns the authenticator app on with a first code from it, and returns ten single-use recovery codes (shown once).",
			Annotations: &capabilities.Annotations{},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, in TOTPConfirmInput) (RecoveryCodesOutput, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return RecoveryCodesOutput{}, err
				}
				codes, err := s.SecondFactors.ConfirmTOTP(ctx, u, in.Code)
				if err != nil {
					return RecoveryCodesOutput{}, capabilityError(err)
				}
				tell(ctx, u, FactorTOTPEnabled)
				return RecoveryCodesOutput{RecoveryCodes: codes}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[TOTPDisableInput, DoneOutput]{
			Name: "accountTOTPDisable", Domain: "account", Title: "Turn off the authenticator app",
			Description: "Turns off the authenticator app after checking the password and a code. Every other browser session and connected app is signed out.",
			Annotations: &capabilities.Annotations{Destructive: true},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, in TOTPDisableInput) (DoneOutput, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return DoneOutput{}, err
				}
				if err := s.SecondFactors.DisableTOTP(ctx, u, in.Password, in.Code); err != nil {
					return DoneOutput{}, capabilityError(err)
				}
				tell(ctx, u, FactorTOTPDisabled)
				return DoneOutput{Done: true}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[PasswordInput, RecoveryCodesOutput]{
			Name: "accountRecoveryCodesReset", Domain: "account", Title: "Make new recovery codes",
			Description: "Replaces the recovery codes after checking the password and a proof of a second factor (a code from the app, a recovery code, or a passkey), and returns the new ones (shown once). Every other browser session and connected app is signed out.",
			Annotations: &capabilities.Annotations{Destructive: true},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, in PasswordInput) (RecoveryCodesOutput, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return RecoveryCodesOutput{}, err
				}
				codes, err := s.SecondFactors.RegenerateRecoveryCodes(ctx, u, in.Password, in.Proof())
				if err != nil {
					return RecoveryCodesOutput{}, reauthError(err)
				}
				tell(ctx, u, FactorRecoveryCodesReset)
				return RecoveryCodesOutput{RecoveryCodes: codes}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[PasswordInput, PasskeyCeremony]{
			Name: "accountPasskeyRegisterBegin", Domain: "account", Title: "Start registering a passkey",
			Description: "Checks the password and, when the account has a second factor, a proof of it (a code from the app, a recovery code, or a passkey); returns the options for the browser to create a passkey, and the token accountPasskeyRegister takes (single use, expires in five minutes).",
			Annotations: &capabilities.Annotations{},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, in PasswordInput) (PasskeyCeremony, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return PasskeyCeremony{}, err
				}
				// A borrowed session or a phished password must not be able to
				// add a factor: the password, and a proof of a factor the
				// account has when it has one.
				if err := s.SecondFactors.Reauthenticate(ctx, u, in.Password, in.Proof()); err != nil {
					return PasskeyCeremony{}, reauthError(err)
				}
				c, err := s.SecondFactors.BeginPasskeyRegistration(ctx, u)
				return c, capabilityError(err)
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, PasskeyCeremony]{
			Name: "accountPasskeyProofBegin", Domain: "account", Title: "Start confirming with a passkey",
			Description: "Returns the options for the browser to sign with one of the signed-in person's passkeys, and the token (single use, expires in five minutes) that, with the browser's answer, proves the factor to an action that asks for one (passkeyToken and passkeyCredential).",
			Annotations: &capabilities.Annotations{},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (PasskeyCeremony, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return PasskeyCeremony{}, err
				}
				c, err := s.SecondFactors.BeginPasskeyProof(ctx, u)
				return c, capabilityError(err)
			},
		}),
		capabilities.Define(capabilities.Spec[PasskeyRegisterInput, Passkey]{
			Name: "accountPasskeyRegister", Domain: "account", Title: "Register a passkey",
			Description: "Checks the passkey the browser created and adds it to the signed-in person's account under a name.",
			Annotations: &capabilities.Annotations{},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, in PasskeyRegisterInput) (Passkey, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return Passkey{}, err
				}
				raw, err := json.Marshal(in.Credential)
				if err != nil {
					return Passkey{}, capabilityError(ErrPasskeyInvalid)
				}
				p, err := s.SecondFactors.FinishPasskeyRegistration(ctx, u, in.Token, in.Name, raw)
				if err != nil {
					return Passkey{}, capabilityError(err)
				}
				tell(ctx, u, FactorPasskeyAdded)
				return p, nil
			},
		}),
		capabilities.Define(capabilities.Spec[PasskeyRenameInput, DoneOutput]{
			Name: "accountPasskeyRename", Domain: "account", Title: "Rename a passkey",
			Description: "Renames one of the signed-in person's passkeys.",
			Annotations: &capabilities.Annotations{Idempotent: true},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, in PasskeyRenameInput) (DoneOutput, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return DoneOutput{}, err
				}
				if err := s.SecondFactors.RenamePasskey(ctx, u.ID, in.ID, in.Name); err != nil {
					return DoneOutput{}, capabilityError(err)
				}
				tell(ctx, u, FactorPasskeyRenamed)
				return DoneOutput{Done: true}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[PasskeyRemoveInput, DoneOutput]{
			Name: "accountPasskeyRemove", Domain: "account", Title: "Remove a passkey",
			Description: "Removes one of the signed-in person's passkeys after checking the password. Every other browser session and connected app is signed out.",
			Annotations: &capabilities.Annotations{Destructive: true},
			Requires:    own,
			Handler: func(ctx context.Context, call *capabilities.Call, in PasskeyRemoveInput) (DoneOutput, error) {
				u, err := s.callerUser(ctx, call.Caller)
				if err != nil {
					return DoneOutput{}, err
				}
				// A borrowed session must not be able to remove a factor (and,
				// with it, sign the owner out everywhere while it gets a new
				// session): as turning the app off, it takes the password.
				if _, err := s.Credentials.VerifyPassword(ctx, u.ID, in.Password); err != nil {
					return DoneOutput{}, capabilityError(err)
				}
				if err := s.SecondFactors.RemovePasskey(ctx, u.ID, in.ID); err != nil {
					return DoneOutput{}, capabilityError(err)
				}
				tell(ctx, u, FactorPasskeyRemoved)
				return DoneOutput{Done: true}, nil
			},
		}),
	}
}

// AdminSecondFactorGate is a capabilities.Options.RoleGate: with
// Config.RequireAdminSecondFactor it refuses admin capabilities to an
// account without a second factor (capabilities.CodeSecondFactorRequired,
// naming the enrolment page). Without that setting it allows everything.
func (s *SecondFactors) AdminSecondFactorGate(ctx context.Context, c capabilities.Caller, role string) error {
	if !s.cfg.RequireAdminSecondFactor || role != capabilities.RoleAdmin {
		return nil
	}
	ok, err := s.AdminHasRequiredFactor(ctx, c.OwnerID, c.UserID)
	if err != nil {
		return err
	}
	if !ok {
		return capabilityError(ErrAdminSecondFactorRequired)
	}
	return nil
}

// RequiresAdminSecondFactor reports Config.RequireAdminSecondFactor.
func (s *SecondFactors) RequiresAdminSecondFactor() bool { return s.cfg.RequireAdminSecondFactor }

// AdminHasRequiredFactor reports whether the account (by internal id, or
// by stable id when that is 0) satisfies RequireAdminSecondFactor: always
// true when the setting is off.
func (s *SecondFactors) AdminHasRequiredFactor(ctx context.Context, ownerID int64, stableID string) (bool, error) {
	if !s.cfg.RequireAdminSecondFactor {
		return true, nil
	}
	if ownerID == 0 {
		u, err := s.identity.UserByStableID(ctx, stableID)
		if err != nil {
			return false, err
		}
		ownerID = u.ID
	}
	return s.HasSecondFactor(ctx, ownerID)
}
