package workspaces

import (
	"context"
	"encoding/json"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
)

// Inputs and outputs of the workspace capabilities.
type (
	CreateInput struct {
		Name string `json:"name" jsonschema:"the workspace's name"`
	}
	ListOutput struct {
		Workspaces []Workspace `json:"workspaces"`
	}
	IDInput struct {
		WorkspaceID string `json:"workspaceId" jsonschema:"the workspace's id (workspaceId in workspaceList)"`
	}
	InviteInput struct {
		WorkspaceID string `json:"workspaceId" jsonschema:"the workspace's id (workspaceId in workspaceList)"`
		Email       string `json:"email" jsonschema:"the address to send the invitation link to"`
		Role        Role   `json:"role" jsonschema:"the member's role: a viewer reads; an admin also writes and manages admins and viewers; an owner also manages owners" schema:"enum=owner|admin|viewer"`
	}
	AcceptInput struct {
		Token string `json:"token" jsonschema:"the token of the invitation link"`
	}
	MembersOutput struct {
		Members     []Member     `json:"members"`
		Invitations []Invitation `json:"invitations" jsonschema:"pending invitations (admins and owners only)"`
	}
	RoleSetInput struct {
		WorkspaceID string `json:"workspaceId" jsonschema:"the workspace's id (workspaceId in workspaceList)"`
		UserID      string `json:"userId" jsonschema:"the member's stable user id"`
		Role        Role   `json:"role" jsonschema:"the member's role: a viewer reads; an admin also writes and manages admins and viewers; an owner also manages owners" schema:"enum=owner|admin|viewer"`
	}
	MemberInput struct {
		WorkspaceID string `json:"workspaceId" jsonschema:"the workspace's id (workspaceId in workspaceList)"`
		UserID      string `json:"userId" jsonschema:"the member's stable user id"`
	}
	DoneOutput struct {
		Done bool `json:"done"`
	}
	DeleteInput struct {
		WorkspaceID       string `json:"workspaceId" jsonschema:"the workspace's id (workspaceId in workspaceList)"`
		ConfirmationToken string `json:"confirmationToken,omitempty" jsonschema:"leave out to get a token; pass it back to delete"`
	}
	KeyCreateInput struct {
		WorkspaceID       string         `json:"workspaceId" jsonschema:"the workspace's id (workspaceId in workspaceList)"`
		Name              string         `json:"name" jsonschema:"what the key is for"`
		MaxRole           Role           `json:"maxRole" jsonschema:"the most the key may do (a role)" schema:"enum=owner|admin|viewer"`
		CurrentPassword   string         `json:"currentPassword" jsonschema:"your account's current password"`
		Code              string         `json:"code,omitempty" jsonschema:"when your account has a second factor: a code from the authenticator app, or a recovery code"`
		PasskeyToken      string         `json:"passkeyToken,omitempty" jsonschema:"instead of code: the token of accountPasskeyProofBegin"`
		PasskeyCredential map[string]any `json:"passkeyCredential,omitempty" jsonschema:"with passkeyToken: the PublicKeyCredential the browser returned, as JSON"`
	}
	KeysOutput struct {
		Keys []APIKey `json:"keys"`
	}
	OwnKeysOutput struct {
		Keys []OwnKey `json:"keys"`
	}
	KeyRevokeInput struct {
		WorkspaceID string `json:"workspaceId" jsonschema:"the workspace's id (workspaceId in workspaceList)"`
		KeyID       int64  `json:"keyId" jsonschema:"the key's id (keyId in workspaceKeyList)"`
	}
	ExportFileInput struct {
		WorkspaceID string `json:"workspaceId" jsonschema:"the workspace's id (workspaceId in workspaceList)"`
		FileID      string `json:"fileId" jsonschema:"the file's id (fileId in the export's files)"`
		Version     int64  `json:"version" jsonschema:"the file version"`
		Offset      int64  `json:"offset,omitempty" jsonschema:"where to start; the previous chunk's next"`
	}
	DeleteOutput struct {
		Deleted           bool       `json:"deleted"`
		ConfirmationToken string     `json:"confirmationToken,omitempty" jsonschema:"call workspaceDelete again with this token to delete"`
		ExpiresAt         *time.Time `json:"expiresAt,omitempty"`
		Message           string     `json:"message"`
	}
)

func (s *Service) capabilities() []capabilities.Capability {
	read := &capabilities.Annotations{ReadOnly: true, Idempotent: true}
	write := &capabilities.Annotations{}
	destructive := &capabilities.Annotations{Destructive: true}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[CreateInput, Workspace]{
			Name: "workspaceCreate", Domain: "workspace", Title: "Create a workspace",
			Description: "Creates a workspace, shared data for a team, with you as its owner.",
			Annotations: write,
			Handler: func(ctx context.Context, call *capabilities.Call, in CreateInput) (Workspace, error) {
				return s.Create(ctx, call.Caller, in.Name)
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, ListOutput]{
			Name: "workspaceList", Domain: "workspace", Title: "List workspaces",
			Description: "Lists the workspaces you belong to, with your role in each.",
			Annotations: read,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (ListOutput, error) {
				ws, err := s.List(ctx, call.Caller)
				if ws == nil {
					ws = []Workspace{}
				}
				return ListOutput{Workspaces: ws}, err
			},
		}),
		capabilities.Define(capabilities.Spec[IDInput, Details]{
			Name: "workspaceGet", Domain: "workspace", Title: "Get a workspace",
			Description: "Returns a workspace you belong to: its name, your role, its revision and member count.",
			Annotations: read,
			Handler: func(ctx context.Context, call *capabilities.Call, in IDInput) (Details, error) {
				return s.Get(ctx, call.Caller, in.WorkspaceID)
			},
		}),
		capabilities.Define(capabilities.Spec[InviteInput, Invitation]{
			Name: "workspaceMemberInvite", Domain: "workspace", Title: "Invite a member",
			Description: "Mails a single-use invitation link that expires. Admins invite admins and viewers; owners also invite owners.",
			Annotations: write,
			Handler: func(ctx context.Context, call *capabilities.Call, in InviteInput) (Invitation, error) {
				return s.Invite(ctx, call.Caller, in.WorkspaceID, in.Email, in.Role)
			},
		}),
		capabilities.Define(capabilities.Spec[AcceptInput, Workspace]{
			Name: "workspaceInvitationAccept", Domain: "workspace", Title: "Accept an invitation",
			Description: "Joins a workspace with the token of an invitation link sent to your account's email address.",
			Annotations: write,
			Handler: func(ctx context.Context, call *capabilities.Call, in AcceptInput) (Workspace, error) {
				return s.Accept(ctx, call.Caller, in.Token)
			},
		}),
		capabilities.Define(capabilities.Spec[IDInput, MembersOutput]{
			Name: "workspaceMemberList", Domain: "workspace", Title: "List members",
			Description: "Lists a workspace's members and roles, and, for admins and owners, its pending invitations.",
			Annotations: read,
			Handler: func(ctx context.Context, call *capabilities.Call, in IDInput) (MembersOutput, error) {
				m, inv, err := s.Members(ctx, call.Caller, in.WorkspaceID)
				return MembersOutput{Members: m, Invitations: inv}, err
			},
		}),
		capabilities.Define(capabilities.Spec[RoleSetInput, Member]{
			Name: "workspaceMemberRoleSet", Domain: "workspace", Title: "Change a member's role",
			Description: "Changes a member's role. Admins switch admins and viewers; owners change anyone. The last owner stays owner.",
			Annotations: write,
			Handler: func(ctx context.Context, call *capabilities.Call, in RoleSetInput) (Member, error) {
				return s.SetRole(ctx, call.Caller, in.WorkspaceID, in.UserID, in.Role)
			},
		}),
		capabilities.Define(capabilities.Spec[MemberInput, DoneOutput]{
			Name: "workspaceMemberRemove", Domain: "workspace", Title: "Remove a member",
			Description: "Removes a member from a workspace. Admins remove admins and viewers; owners remove anyone but the last owner.",
			Annotations: destructive,
			Handler: func(ctx context.Context, call *capabilities.Call, in MemberInput) (DoneOutput, error) {
				err := s.Remove(ctx, call.Caller, in.WorkspaceID, in.UserID)
				return DoneOutput{Done: err == nil}, err
			},
		}),
		capabilities.Define(capabilities.Spec[IDInput, DoneOutput]{
			Name: "workspaceLeave", Domain: "workspace", Title: "Leave a workspace",
			Description: "Leaves a workspace. The last owner cannot leave: make someone else owner or delete the workspace.",
			Annotations: destructive,
			Handler: func(ctx context.Context, call *capabilities.Call, in IDInput) (DoneOutput, error) {
				err := s.Leave(ctx, call.Caller, in.WorkspaceID)
				return DoneOutput{Done: err == nil}, err
			},
		}),
		capabilities.Define(capabilities.Spec[KeyCreateInput, NewKey]{
			Name: "workspaceKeyCreate", Domain: "workspace", Title: "Create a workspace API key",
			Description: "Creates an API key for one workspace with a maximum role; the key is shown once and the account is told by mail. " +
				"Owners only, from the web shell, with the current password and, when the account has a second factor, a fresh proof of it.",
			Annotations: write,
			Requires:    capabilities.Requirement{SessionOnly: true},
			Handler: func(ctx context.Context, call *capabilities.Call, in KeyCreateInput) (NewKey, error) {
				p := KeyProof{Password: in.CurrentPassword, Code: in.Code, PasskeyToken: in.PasskeyToken}
				if in.PasskeyCredential != nil {
					p.PasskeyCredential, _ = json.Marshal(in.PasskeyCredential)
				}
				return s.CreateKey(ctx, call.Caller, in.WorkspaceID, in.Name, in.MaxRole, p)
			},
		}),
		capabilities.Define(capabilities.Spec[struct{}, OwnKeysOutput]{
			Name: "workspaceKeyListOwn", Domain: "workspace", Title: "List your workspace API keys",
			Description: "Lists the live API keys you made, in every workspace: workspace, name, maximum role, when made and last used (never the keys themselves).",
			Annotations: read,
			Handler: func(ctx context.Context, call *capabilities.Call, _ struct{}) (OwnKeysOutput, error) {
				keys, err := s.OwnKeys(ctx, call.Caller)
				if keys == nil {
					keys = []OwnKey{}
				}
				return OwnKeysOutput{Keys: keys}, err
			},
		}),
		capabilities.Define(capabilities.Spec[IDInput, KeysOutput]{
			Name: "workspaceKeyList", Domain: "workspace", Title: "List workspace API keys",
			Description: "Lists a workspace's API keys (never the keys themselves). Owners only.",
			Annotations: read,
			Handler: func(ctx context.Context, call *capabilities.Call, in IDInput) (KeysOutput, error) {
				keys, err := s.Keys(ctx, call.Caller, in.WorkspaceID)
				return KeysOutput{Keys: keys}, err
			},
		}),
		capabilities.Define(capabilities.Spec[KeyRevokeInput, DoneOutput]{
			Name: "workspaceKeyRevoke", Domain: "workspace", Title: "Revoke a workspace API key",
			Description: "Revokes a workspace API key at once. Owners revoke any key of the workspace; members the keys they made.",
			Annotations: destructive,
			Handler: func(ctx context.Context, call *capabilities.Call, in KeyRevokeInput) (DoneOutput, error) {
				err := s.RevokeKey(ctx, call.Caller, in.WorkspaceID, in.KeyID)
				return DoneOutput{Done: err == nil}, err
			},
		}),
		capabilities.Define(capabilities.Spec[IDInput, Export]{
			Name: "workspaceExport", Domain: "workspace", Title: "Export a workspace",
			Description: "Returns a workspace's logical export: members, revision, event log, file metadata (tombstones included) and every row of its tables. Owners and admins.",
			Annotations: read,
			Handler: func(ctx context.Context, call *capabilities.Call, in IDInput) (Export, error) {
				return s.Export(ctx, call.Caller, in.WorkspaceID)
			},
		}),
		capabilities.Define(capabilities.Spec[ExportFileInput, FileChunk]{
			Name: "workspaceExportFile", Domain: "workspace", Title: "Export a file's bytes",
			Description: "Returns up to 256 KiB of a file version's bytes from offset, for a complete export. Owners and admins.",
			Annotations: read,
			Handler: func(ctx context.Context, call *capabilities.Call, in ExportFileInput) (FileChunk, error) {
				return s.ExportFile(ctx, call.Caller, in.WorkspaceID, in.FileID, in.Version, in.Offset)
			},
		}),
		capabilities.Define(capabilities.Spec[DeleteInput, DeleteOutput]{
			Name: "workspaceDelete", Domain: "workspace", Title: "Delete a workspace",
			Description: "Deletes a workspace and all its data, in two steps: called without confirmationToken it returns one; " +
				"called again with it (within 10 minutes) it deletes. Owners only.",
			Annotations: destructive,
			Handler: func(ctx context.Context, call *capabilities.Call, in DeleteInput) (DeleteOutput, error) {
				if in.ConfirmationToken == "" {
					req, err := s.RequestDelete(ctx, call.Caller, in.WorkspaceID)
					if err != nil {
						return DeleteOutput{}, err
					}
					return DeleteOutput{ConfirmationToken: req.Token, ExpiresAt: &req.ExpiresAt,
						Message: "Deleting workspace \"" + req.Name + "\" removes all its data for good. To go ahead, call workspaceDelete again with this confirmationToken."}, nil
				}
				if err := s.Delete(ctx, call.Caller, in.WorkspaceID, in.ConfirmationToken); err != nil {
					return DeleteOutput{}, err
				}
				return DeleteOutput{Deleted: true, Message: "The workspace is deleted."}, nil
			},
		}),
	}
}
