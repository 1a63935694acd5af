package capabilities

import (
	"cmp"
	"context"
	"slices"
	"strings"
)

// WhoamiOutput is what whoami returns.
type WhoamiOutput struct {
	UserID      string   `json:"userId" jsonschema:"the caller's stable user id"`
	Username    string   `json:"username" jsonschema:"the caller's username"`
	Roles       []string `json:"roles" jsonschema:"roles the account holds"`
	Permissions []string `json:"permissions" jsonschema:"permissions the account holds"`
}

// SearchInput is what capabilitiesSearch accepts.
type SearchInput struct {
	Query string `json:"query" jsonschema:"keywords to look for in names, titles, descriptions and domains"`
	Limit int    `json:"limit,omitempty" jsonschema:"maximum number of matches (default 10, at most 50)" schema:"minimum=1,maximum=50,default=10"`
}

// SearchOutput is what capabilitiesSearch returns.
type SearchOutput struct {
	Matches []SearchMatch `json:"matches" jsonschema:"matching capabilities, best first"`
}

// SearchMatch describes one capability found by capabilitiesSearch.
type SearchMatch struct {
	Name        string `json:"name"`
	Domain      string `json:"domain"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description"`
	ReadOnly    bool   `json:"readOnly"`
}

func builtins(r *Registry) []Capability {
	readOnly := &Annotations{ReadOnly: true, Idempotent: true}
	return []Capability{
		Define(Spec[struct{}, WhoamiOutput]{
			Name: "whoami", Domain: "account", Title: "Who am I",
			Description: "Returns the signed-in user's id, username, roles and permissions.",
			Annotations: readOnly,
			Handler: func(_ context.Context, call *Call, _ struct{}) (WhoamiOutput, error) {
				c := call.Caller
				perms := make([]string, len(c.Permissions))
				for i, p := range c.Permissions {
					perms[i] = string(p)
				}
				roles := append([]string{}, c.Roles...)
				return WhoamiOutput{UserID: c.UserID, Username: c.Username, Roles: roles, Permissions: perms}, nil
			},
		}),
		Define(Spec[SearchInput, SearchOutput]{
			Name: "capabilitiesSearch", Domain: "meta", Title: "Search capabilities",
			Description: "Finds the capabilities you can call by keyword, for when the tool list is long. " +
				"Every word of the query must appear in a capability's name, title, description or domain.",
			Annotations: readOnly,
			Handler: func(ctx context.Context, call *Call, in SearchInput) (SearchOutput, error) {
				return SearchOutput{Matches: search(r.Visible(ctx, call.Caller), in.Query, in.Limit)}, nil
			},
		}),
	}
}

// search ranks caps by how many query words appear in their names, keeping
// those that contain every word somewhere.
func search(caps []Capability, query string, limit int) []SearchMatch {
	if limit <= 0 {
		limit = 10
	}
	limit = min(limit, 50)
	words := strings.Fields(strings.ToLower(query))
	type scored struct {
		c     Capability
		score int
	}
	var hits []scored
	for _, c := range caps {
		name := strings.ToLower(c.Name)
		text := strings.ToLower(strings.Join([]string{c.Name, c.Title, c.Description, c.Domain}, " "))
		score := 0
		for _, w := range words {
			if !strings.Contains(text, w) {
				score = -1
				break
			}
			if strings.Contains(name, w) {
				score += 2
			} else {
				score++
			}
		}
		if score >= 0 {
			hits = append(hits, scored{c, score})
		}
	}
	slices.SortStableFunc(hits, func(a, b scored) int { return cmp.Compare(b.score, a.score) })
	out := []SearchMatch{}
	for _, h := range hits[:min(len(hits), limit)] {
		out = append(out, SearchMatch{
			Name: h.c.Name, Domain: h.c.Domain, Title: h.c.Title,
			Description: h.c.Description, ReadOnly: h.c.Annotations.ReadOnly,
		})
	}
	return out
}
