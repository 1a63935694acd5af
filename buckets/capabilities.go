package buckets

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// KeyInput names one key of one bucket (storageGet).
type KeyInput struct {
	StorageID string `json:"storageId" jsonschema:"the bucket: exec:<runId> (a code run's), package:<name> (a package's), job:<package>:<job>, or a name of your own (1-64 letters, digits, '.', '_', '-')"`
	Key       string `json:"key" jsonschema:"the key: 1 to 512 bytes of text"`
}

// GetOutput is the output of storageGet.
type GetOutput struct {
	Found     bool       `json:"found"`
	Value     any        `json:"value,omitempty" jsonschema:"the stored JSON value, when found"`
	Revision  int64      `json:"revision,omitempty" jsonschema:"the entry's revision: pass it as ifRevision to storageSet to write only if nobody changed it since"`
	UpdatedAt *time.Time `json:"updatedAt,omitempty"`
}

// SetInput is the input of storageSet.
type SetInput struct {
	StorageID  string `json:"storageId" jsonschema:"the bucket (created on first write): exec:<runId>, package:<name>, job:<package>:<job>, or a name of your own (1-64 letters, digits, '.', '_', '-')"`
	Key        string `json:"key" jsonschema:"the key: 1 to 512 bytes of text"`
	Value      any    `json:"value" jsonschema:"any JSON value, at most 1 MiB"`
	IfRevision *int64 `json:"ifRevision,omitempty" jsonschema:"write only if the key has this revision; 0 means only if the key does not exist (compare-and-set)"`
}

// setArgs is SetInput as decoded: the value's exact text.
type setArgs struct {
	StorageID  string          `json:"storageId"`
	Key        string          `json:"key"`
	Value      json.RawMessage `json:"value"`
	IfRevision *int64          `json:"ifRevision"`
}

// SetOutput is the output of storageSet.
type SetOutput struct {
	Revision int64 `json:"revision" jsonschema:"the entry's new revision"`
}

// DeleteInput is the input of storageDelete.
type DeleteInput struct {
	StorageID  string `json:"storageId" jsonschema:"the bucket"`
	Key        string `json:"key" jsonschema:"the key"`
	IfRevision *int64 `json:"ifRevision,omitempty" jsonschema:"delete only if the key has this revision"`
}

// DeleteOutput is the output of storageDelete.
type DeleteOutput struct {
	Deleted bool `json:"deleted" jsonschema:"whether the key existed"`
}

// ListInput is the input of storageList.
type ListInput struct {
	StorageID string `json:"storageId" jsonschema:"the bucket"`
	Prefix    string `json:"prefix,omitempty" jsonschema:"only keys that start with this text"`
	Cursor    string `json:"cursor,omitempty" jsonschema:"the nextCursor of the previous page"`
	Limit     int    `json:"limit,omitempty" jsonschema:"page size, 1 to 1000 (default 50)" schema:"minimum=1,maximum=1000,default=50"`
}

// ListOutput is the output of storageList.
type ListOutput struct {
	Keys       []KeyInfo `json:"keys" jsonschema:"the keys in order (bytewise), without their values"`
	NextCursor string    `json:"nextCursor,omitempty"`
}

// BucketsInput is the input of storageBuckets.
type BucketsInput struct {
	Cursor string `json:"cursor,omitempty" jsonschema:"the nextCursor of the previous page"`
	Limit  int    `json:"limit,omitempty" jsonschema:"page size, 1 to 1000 (default 50)" schema:"minimum=1,maximum=1000,default=50"`
}

// BucketsOutput is the output of storageBuckets.
type BucketsOutput struct {
	Buckets    []Bucket `json:"buckets"`
	Usage      Usage    `json:"usage" jsonschema:"your use of the storage budget, across all your buckets"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

// DropInput is the input of storageDrop.
type DropInput struct {
	StorageID string `json:"storageId" jsonschema:"the bucket to delete with all its keys"`
}

// TransactInput is the input of storageTransact.
type TransactInput struct {
	StorageID string       `json:"storageId" jsonschema:"the bucket (created on first write)"`
	Ops       []TransactOp `json:"ops" jsonschema:"1 to 100 operations on distinct keys, applied all or none" schema:"minItems=1,maxItems=100"`
}

// TransactOp is one operation of storageTransact.
type TransactOp struct {
	Op         string `json:"op" jsonschema:"what to do with the key" schema:"enum=set|delete"`
	Key        string `json:"key" jsonschema:"the key"`
	Value      any    `json:"value,omitempty" jsonschema:"the JSON value to store (set only; at most 1 MiB)"`
	IfRevision *int64 `json:"ifRevision,omitempty" jsonschema:"apply only if the key has this revision; 0 means only if it does not exist"`
}

// transactArgs is TransactInput as decoded: values keep their exact text.
type transactArgs struct {
	StorageID string `json:"storageId"`
	Ops       []struct {
		Op         string          `json:"op"`
		Key        string          `json:"key"`
		Value      json.RawMessage `json:"value"`
		IfRevision *int64          `json:"ifRevision"`
	} `json:"ops"`
}

// TransactOutput is the output of storageTransact.
type TransactOutput struct {
	Results []OpResult `json:"results" jsonschema:"one per operation, in order"`
}

var (
	readOwn  = capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.ReadUserOwn}}
	writeOwn = capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}}
)

// Capabilities returns the storage capabilities: storageGet, storageSet,
// storageDelete, storageList, storageTransact, storageBuckets and
// storageDrop. Each acts on the caller's own buckets only.
func (s *Service) Capabilities() []capabilities.Capability {
	budget := fmt.Sprintf("Your buckets share a budget of %s (or your plan's storage bytes, when it sets them) and %d keys.", mib(s.cfg.MaxBytes), s.cfg.MaxKeys)
	set := capabilities.Define(capabilities.Spec[SetInput, SetOutput]{
		Name: "storageSet", Domain: "storage", Title: "Store a value",
		Description: "Stores a JSON value (up to 1 MiB) under a key in one of your storage buckets, creating the bucket on first write, and returns the entry's new revision. " +
			"With ifRevision it is a compare-and-set: it writes only if the key still has that revision (0: only if the key does not exist), and answers a conflict otherwise. " + budget,
		Annotations: &capabilities.Annotations{Destructive: true},
		Requires:    writeOwn,
	})
	set = withExactValues(set, func(ctx context.Context, call *capabilities.Call, in setArgs) (SetOutput, error) {
		o, err := s.owner(ctx, call.Caller)
		if err != nil {
			return SetOutput{}, err
		}
		rev, err := s.Set(ctx, o, in.StorageID, in.Key, in.Value, in.IfRevision)
		return SetOutput{Revision: rev}, err
	})
	transact := capabilities.Define(capabilities.Spec[TransactInput, TransactOutput]{
		Name: "storageTransact", Domain: "storage", Title: "Change several keys at once",
		Description: "Applies up to 100 sets and deletes to distinct keys of one of your buckets in one transaction: all of them, or none when a condition (ifRevision) fails or the budget would be exceeded. " + budget,
		Annotations: &capabilities.Annotations{Destructive: true},
		Requires:    writeOwn,
	})
	transact = withExactValues(transact, func(ctx context.Context, call *capabilities.Call, in transactArgs) (TransactOutput, error) {
		ops := make([]Op, len(in.Ops))
		for i, op := range in.Ops {
			switch op.Op {
			case "set", "delete":
			default:
				return TransactOutput{}, invalid("operation %d: op is \"set\" or \"delete\"", i+1)
			}
			if op.Op == "delete" && len(op.Value) > 0 {
				return TransactOutput{}, invalid("operation %d: a delete has no value", i+1)
			}
			ops[i] = Op{Delete: op.Op == "delete", Key: op.Key, Value: op.Value, IfRevision: op.IfRevision}
		}
		o, err := s.owner(ctx, call.Caller)
		if err != nil {
			return TransactOutput{}, err
		}
		res, err := s.Transact(ctx, o, in.StorageID, ops)
		return TransactOutput{Results: res}, err
	})
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[KeyInput, GetOutput]{
			Name: "storageGet", Domain: "storage", Title: "Read a stored value",
			Description: "Returns the JSON value stored under a key in one of your storage buckets, with its revision; found is false when there is none.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in KeyInput) (GetOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return GetOutput{}, err
				}
				e, ok, err := s.Get(ctx, o, in.StorageID, in.Key)
				if err != nil || !ok {
					return GetOutput{}, err
				}
				return GetOutput{Found: true, Value: e.Value, Revision: e.Revision, UpdatedAt: &e.UpdatedAt}, nil
			},
		}),
		set,
		capabilities.Define(capabilities.Spec[DeleteInput, DeleteOutput]{
			Name: "storageDelete", Domain: "storage", Title: "Delete a stored value",
			Description: "Deletes a key from one of your storage buckets (with ifRevision, only if it still has that revision) and says whether it existed.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires:    writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in DeleteInput) (DeleteOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return DeleteOutput{}, err
				}
				ok, err := s.Delete(ctx, o, in.StorageID, in.Key, in.IfRevision)
				return DeleteOutput{Deleted: ok}, err
			},
		}),
		capabilities.Define(capabilities.Spec[ListInput, ListOutput]{
			Name: "storageList", Domain: "storage", Title: "List stored keys",
			Description: "Lists the keys of one of your storage buckets in order, optionally only those starting with a prefix, with each key's revision and size; page with nextCursor.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in ListInput) (ListOutput, error) {
				o, req, err := s.paged(ctx, call.Caller, in.Cursor, in.Limit)
				if err != nil {
					return ListOutput{}, err
				}
				page, err := s.List(ctx, o, in.StorageID, in.Prefix, req)
				if err != nil {
					return ListOutput{}, err
				}
				return ListOutput{Keys: nonNil(page.Items), NextCursor: page.Next}, nil
			},
		}),
		transact,
		capabilities.Define(capabilities.Spec[BucketsInput, BucketsOutput]{
			Name: "storageBuckets", Domain: "storage", Title: "List your storage buckets",
			Description: "Lists your storage buckets by storage id, with each one's keys and bytes, and your use of the storage budget.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in BucketsInput) (BucketsOutput, error) {
				o, req, err := s.paged(ctx, call.Caller, in.Cursor, in.Limit)
				if err != nil {
					return BucketsOutput{}, err
				}
				page, err := s.Buckets(ctx, o, req)
				if err != nil {
					return BucketsOutput{}, err
				}
				u, err := s.Usage(ctx, o)
				if err != nil {
					return BucketsOutput{}, err
				}
				return BucketsOutput{Buckets: nonNil(page.Items), Usage: u, NextCursor: page.Next}, nil
			},
		}),
		capabilities.Define(capabilities.Spec[DropInput, Dropped]{
			Name: "storageDrop", Domain: "storage", Title: "Delete a storage bucket",
			Description: "Deletes one of your storage buckets with all its keys, and gives its space back to your budget.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires:    writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in DropInput) (Dropped, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Dropped{}, err
				}
				return s.Drop(ctx, o, in.StorageID)
			},
		}),
	}
}

// withExactValues gives c (defined without a handler) one that decodes
// the arguments into R, which mirrors c's input with json.RawMessage for
// its values: a value is stored as sent (a number keeps every digit),
// where decoding into the input type's any would round it to a float.
// The input schema is still the input type's, checked by Invoke.
func withExactValues[R, Out any](c capabilities.Capability, h func(context.Context, *capabilities.Call, R) (Out, error)) capabilities.Capability {
	c.Handler = func(ctx context.Context, call *capabilities.Call, args json.RawMessage) (capabilities.Result, error) {
		var in R
		if trimmed := bytes.TrimSpace(args); len(trimmed) > 0 && string(trimmed) != "null" {
			if err := json.Unmarshal(trimmed, &in); err != nil {
				return capabilities.Result{}, &capabilities.Error{Code: capabilities.CodeInvalidInput, Message: "arguments do not match the input schema", Err: err}
			}
		}
		out, err := h(ctx, call, in)
		if err != nil {
			return capabilities.Result{}, err
		}
		out = capabilities.NormalizeOutput(out) // nil slices go out as [], as the schema says
		text, err := json.Marshal(out)
		if err != nil {
			return capabilities.Result{}, fmt.Errorf("buckets: %s: encode output: %w", c.Name, err)
		}
		return capabilities.Result{Content: []capabilities.Content{capabilities.Text{Text: string(text)}}, Structured: out}, nil
	}
	return c
}

func (s *Service) paged(ctx context.Context, c capabilities.Caller, cursor string, limit int) (storage.Owner, storage.PageRequest, error) {
	req, err := storage.PageInput(cursor, limit)
	if err != nil {
		return storage.Owner{}, req, err
	}
	o, err := s.owner(ctx, c)
	return o, req, err
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// mib renders a byte count for a description.
func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
