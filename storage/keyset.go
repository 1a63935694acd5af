package storage

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/uptrace/bun"
)

// ErrInvalidCursor is returned for a cursor that this server did not issue
// or that belongs to another kind of listing. It is the caller's mistake:
// capabilities answer it as invalid input (it implements
// capabilities.InputError).
var ErrInvalidCursor error = inputError{"storage: invalid page cursor", "cursor is not one this listing issued; start again without a cursor"}

// inputError is an error that is the caller's mistake, with a sentence for
// them.
type inputError struct{ msg, caller string }

func (e inputError) Error() string        { return e.msg }
func (e inputError) InvalidInput() string { return e.caller }

// PageInput turns the cursor and limit of a list capability's input into a
// PageRequest, refusing a limit outside 0..MaxPageLimit (0 means the
// default) with an error that capabilities answer as invalid input.
func PageInput(cursor string, limit int) (PageRequest, error) {
	if limit < 0 || limit > MaxPageLimit {
		msg := fmt.Sprintf("limit must be between 1 and %d", MaxPageLimit)
		return PageRequest{}, inputError{"storage: " + msg, msg}
	}
	return PageRequest{Cursor: cursor, Limit: limit}, nil
}

// Page limits applied by Paginate.
const (
	DefaultPageLimit = 50
	MaxPageLimit     = 1000
)

// PageRequest asks for one page: up to Limit items after the position in
// Cursor (empty for the first page). Limit 0 means DefaultPageLimit; larger
// than MaxPageLimit is clamped.
type PageRequest struct {
	Cursor string
	Limit  int
}

// Page is one page of a listing. Next is empty on the last page; otherwise
// pass it as the Cursor of the following request.
type Page[T any] struct {
	Items []T
	Next  string
}

// Keyset describes how a listing is ordered: by one column whose values are
// unique (a primary key, or a unique id), read from each item by Key. Key
// must return an int64 or a string. Kind names the listing; a cursor from
// one Kind is refused by another.
type Keyset[T any] struct {
	Kind   string
	Column string
	Key    func(*T) any
	Desc   bool
}

type cursorBody struct {
	Kind string `json:"k"`
	// After is the key of the last item returned: a JSON number or string.
	After json.RawMessage `json:"a"`
}

// Paginate runs q for one page ordered by ks.Column, starting after
// req.Cursor. It adds WHERE column > last, ORDER BY column and LIMIT n+1 (the
// extra row tells whether there is a next page): the cost of a page does not
// grow with its position, and rows inserted or deleted between pages cause
// neither gaps nor duplicates. q must not set its own ORDER BY or LIMIT.
func Paginate[T any](ctx context.Context, q *bun.SelectQuery, ks Keyset[T], req PageRequest) (Page[T], error) {
	limit := req.Limit
	switch {
	case limit <= 0:
		limit = DefaultPageLimit
	case limit > MaxPageLimit:
		limit = MaxPageLimit
	}
	op, order := ">", "ASC"
	if ks.Desc {
		op, order = "<", "DESC"
	}
	if req.Cursor != "" {
		after, err := decodeCursor(ks.Kind, req.Cursor)
		if err != nil {
			return Page[T]{}, err
		}
		q = q.Where("? "+op+" ?", bun.Ident(ks.Column), after)
	}
	var items []T
	err := q.OrderExpr("? "+order, bun.Ident(ks.Column)).Limit(int64(limit+1)).Scan(ctx, &items)
	if err != nil {
		return Page[T]{}, fmt.Errorf("storage: page %s: %w", ks.Kind, err)
	}
	page := Page[T]{Items: items}
	if len(items) > limit {
		page.Items = items[:limit]
		page.Next, err = encodeCursor(ks.Kind, ks.Key(&page.Items[limit-1]))
		if err != nil {
			return Page[T]{}, err
		}
	}
	return page, nil
}

func encodeCursor(kind string, key any) (string, error) {
	switch key.(type) {
	case int64, string:
	default:
		return "", fmt.Errorf("storage: keyset key must be int64 or string, got %T", key)
	}
	after, err := json.Marshal(key)
	if err != nil {
		return "", fmt.Errorf("storage: encode cursor: %w", err)
	}
	b, err := json.Marshal(cursorBody{Kind: kind, After: after})
	if err != nil {
		return "", fmt.Errorf("storage: encode cursor: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

func decodeCursor(kind, cursor string) (any, error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return nil, ErrInvalidCursor
	}
	var body cursorBody
	if err := json.Unmarshal(raw, &body); err != nil || body.Kind != kind || len(body.After) == 0 {
		return nil, ErrInvalidCursor
	}
	dec := json.NewDecoder(bytes.NewReader(body.After))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, ErrInvalidCursor
	}
	switch v := v.(type) {
	case json.Number:
		n, err := v.Int64()
		if err != nil {
			return nil, ErrInvalidCursor
		}
		return n, nil
	case string:
		return v, nil
	default:
		return nil, ErrInvalidCursor
	}
}
