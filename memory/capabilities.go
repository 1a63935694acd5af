package memory

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/enclave-mcp/enclave/capabilities"
	"github.com/enclave-mcp/enclave/storage"
)

// GetInput names a memory.
type GetInput struct {
	ID string `json:"id" jsonschema:"the memory's id (mem_…)"`
}

// DeleteOutput is the output of memoryDelete.
type DeleteOutput struct {
	Deleted bool `json:"deleted"`
}

// ListInput is the input of memoryList.
type ListInput struct {
	Cursor string   `json:"cursor,omitempty" jsonschema:"the nextCursor of the previous page"`
	Limit  int      `json:"limit,omitempty" jsonschema:"page size, 1 to 1000 (default 50)" schema:"minimum=1,maximum=1000,default=50"`
	Tags   []string `json:"tags,omitempty" jsonschema:"only memories holding every one of these tags"`
	Status string   `json:"status,omitempty" jsonschema:"only memories with this status (default: both)" schema:"enum=active|archived|all"`
}

// ListOutput is the output of memoryList.
type ListOutput struct {
	Memories   []Memory `json:"memories"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

var (
	readOwn  = capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.ReadUserOwn}}
	writeOwn = capabilities.Requirement{Permissions: []capabilities.Permission{capabilities.UpdateUserOwn}}
)

// Capabilities returns memorySave, memorySearch, memoryGet, memoryUpdate,
// memoryDelete and memoryList. Each acts on the caller's own memories.
func (s *Service) Capabilities() []capabilities.Capability {
	search := "Finds your memories most relevant to a query, best first (active ones unless status says otherwise). Write the query in plain words; search syntax is not interpreted."
	if s.Semantic() {
		search += " Ranking combines word matches with meaning (embeddings), so a memory phrased differently can still be found."
	}
	return []capabilities.Capability{
		capabilities.Define(capabilities.Spec[SaveInput, Memory]{
			Name: "memorySave", Domain: "memory", Title: "Remember something",
			Description: "Saves a memory: a short, self-contained statement worth recalling in later conversations (a preference, a fact, a decision), with optional tags and a source. Returns it with its id.",
			Annotations: &capabilities.Annotations{},
			Requires:    writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in SaveInput) (Memory, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Memory{}, err
				}
				return s.Save(ctx, o, Writer(call.Caller), in)
			},
		}),
		capabilities.Define(capabilities.Spec[SearchInput, SearchOutput]{
			Name: "memorySearch", Domain: "memory", Title: "Recall memories",
			Description: search,
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in SearchInput) (SearchOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return SearchOutput{}, err
				}
				return s.Search(ctx, o, in)
			},
		}),
		capabilities.Define(capabilities.Spec[GetInput, Memory]{
			Name: "memoryGet", Domain: "memory", Title: "Get a memory",
			Description: "Returns one of your memories by id.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in GetInput) (Memory, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Memory{}, err
				}
				return s.Get(ctx, o, in.ID)
			},
		}),
		capabilities.Define(capabilities.Spec[UpdateInput, Memory]{
			Name: "memoryUpdate", Domain: "memory", Title: "Change a memory",
			Description: "Changes one of your memories: its text, its tags (replaced as a whole) or its status (archive a memory that no longer holds, instead of deleting it). Absent fields stay as they are. A new text or new tags make you the memory's writer.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires:    writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in UpdateInput) (Memory, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return Memory{}, err
				}
				return s.Update(ctx, o, Writer(call.Caller), in)
			},
		}),
		capabilities.Define(capabilities.Spec[GetInput, DeleteOutput]{
			Name: "memoryDelete", Domain: "memory", Title: "Forget a memory",
			Description: "Deletes one of your memories for good.",
			Annotations: &capabilities.Annotations{Destructive: true, Idempotent: true},
			Requires:    writeOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in GetInput) (DeleteOutput, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return DeleteOutput{}, err
				}
				ok, err := s.Delete(ctx, o, in.ID)
				return DeleteOutput{Deleted: ok}, err
			},
		}),
		capabilities.Define(capabilities.Spec[ListInput, ListOutput]{
			Name: "memoryList", Domain: "memory", Title: "List your memories",
			Description: "Lists your memories, newest first, optionally only those with some tags or a status.",
			Annotations: &capabilities.Annotations{ReadOnly: true, Idempotent: true},
			Requires:    readOwn,
			Handler: func(ctx context.Context, call *capabilities.Call, in ListInput) (ListOutput, error) {
				req, err := storage.PageInput(in.Cursor, in.Limit)
				if err != nil {
					return ListOutput{}, err
				}
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return ListOutput{}, err
				}
				page, err := s.List(ctx, o, Filter{Tags: in.Tags, Status: in.Status}, req)
				if err != nil {
					return ListOutput{}, err
				}
				return ListOutput{Memories: page.Items, NextCursor: page.Next}, nil
			},
		}),
	}
}

// Resource URIs.
const (
	// ResourceTemplate is the URI template of one memory.
	ResourceTemplate = "memory://{id}"
	// IndexURI lists the caller's own memories (the newest indexSize).
	IndexURI  = "memory://index"
	indexSize = 200
)

// ResourceURI is the resource URI of the memory id.
func ResourceURI(id string) string { return "memory://" + id }

// Resources returns the caller's memories as resources: memory://<id>
// reads one (another user's id reads as unknown), and memory://index
// lists the caller's own, newest first. The registry lists fixed
// resources and templates, not one resource per row, so the index is
// how a client finds the URIs; completion of {id} offers them too.
func (s *Service) Resources() []capabilities.Resource {
	return []capabilities.Resource{
		{
			URI: IndexURI, Name: "memories", Title: "Your memories",
			Description: fmt.Sprintf("Your %d newest memories: id, resource URI, status, tags and the start of the text (JSON).", indexSize),
			MIMEType:    "application/json", Requires: readOwn,
			Read: func(ctx context.Context, call *capabilities.Call, uri string, _ map[string]string) ([]capabilities.ResourceContents, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return nil, err
				}
				page, err := s.List(ctx, o, Filter{}, storage.PageRequest{Limit: indexSize})
				if err != nil {
					return nil, err
				}
				type entry struct {
					ID      string   `json:"id"`
					URI     string   `json:"uri"`
					Status  string   `json:"status"`
					Tags    []string `json:"tags"`
					Preview string   `json:"preview"`
				}
				list := make([]entry, 0, len(page.Items))
				for _, m := range page.Items {
					list = append(list, entry{ID: m.ID, URI: ResourceURI(m.ID), Status: m.Status, Tags: m.Tags, Preview: preview(m.Text, 120)})
				}
				raw, err := json.Marshal(map[string]any{"memories": list, "more": page.Next != ""})
				if err != nil {
					return nil, err
				}
				return []capabilities.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(raw)}}, nil
			},
		},
		{
			Template: ResourceTemplate, Name: "memory", Title: "A memory",
			Description: "One of your memories: its text, with its tags, source, writer and status as JSON.",
			MIMEType:    "application/json", Requires: readOwn,
			Allow: func(ctx context.Context, call *capabilities.Call, _ string, params map[string]string) (bool, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return false, err
				}
				_, err = s.Get(ctx, o, params["id"])
				if capabilities.CodeOf(err) == capabilities.CodeNotFound {
					return false, nil
				}
				return err == nil, err
			},
			Read: func(ctx context.Context, call *capabilities.Call, uri string, params map[string]string) ([]capabilities.ResourceContents, error) {
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return nil, err
				}
				m, err := s.Get(ctx, o, params["id"])
				if err != nil {
					return nil, err
				}
				raw, err := json.Marshal(m)
				if err != nil {
					return nil, err
				}
				return []capabilities.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(raw)}}, nil
			},
			Complete: func(ctx context.Context, call *capabilities.Call, param, prefix string) ([]string, error) {
				if param != "id" {
					return nil, nil
				}
				o, err := s.owner(ctx, call.Caller)
				if err != nil {
					return nil, err
				}
				page, err := s.List(ctx, o, Filter{}, storage.PageRequest{Limit: indexSize})
				if err != nil {
					return nil, err
				}
				var ids []string
				for _, m := range page.Items {
					if strings.HasPrefix(m.ID, prefix) {
						ids = append(ids, m.ID)
					}
				}
				return ids, nil
			},
		},
	}
}

// PromptName is the name of the prompt of memories.
const PromptName = "memories"

// promptMemories is how many memories the prompt renders.
const promptMemories = 10

// Prompts returns the prompt "memories": the caller's memories most
// relevant to a topic (argument query, or topic), or the most recent ones
// without one, as a message to start a conversation with.
func (s *Service) Prompts() []capabilities.Prompt {
	return []capabilities.Prompt{{
		Name: PromptName, Title: "What I remember",
		Description: "Your memories most relevant to a topic (or your most recent ones), to give a conversation context.",
		Arguments: []capabilities.PromptArgument{
			{Name: "query", Description: "the topic to recall memories about (default: the most recent memories)"},
			{Name: "topic", Description: "the same as query"},
		},
		Requires: readOwn,
		Get: func(ctx context.Context, call *capabilities.Call, args map[string]string) (capabilities.PromptResult, error) {
			o, err := s.owner(ctx, call.Caller)
			if err != nil {
				return capabilities.PromptResult{}, err
			}
			query := strings.TrimSpace(args["query"])
			if query == "" {
				query = strings.TrimSpace(args["topic"])
			}
			var mems []Memory
			if query != "" {
				found, err := s.Search(ctx, o, SearchInput{Query: query, Limit: promptMemories})
				if err != nil {
					return capabilities.PromptResult{}, err
				}
				for _, f := range found.Memories {
					mems = append(mems, f.Memory)
				}
			} else {
				page, err := s.List(ctx, o, Filter{Status: StatusActive}, storage.PageRequest{Limit: promptMemories})
				if err != nil {
					return capabilities.PromptResult{}, err
				}
				mems = page.Items
			}
			return renderPrompt(query, mems), nil
		},
	}}
}

func renderPrompt(query string, mems []Memory) capabilities.PromptResult {
	var b strings.Builder
	desc := "Your most recent memories"
	if query != "" {
		desc = fmt.Sprintf("Your memories about %q", query)
	}
	switch {
	case len(mems) == 0 && query != "":
		fmt.Fprintf(&b, "I have no memories about %q yet.", query)
	case len(mems) == 0:
		b.WriteString("I have no memories yet.")
	default:
		if query != "" {
			fmt.Fprintf(&b, "Here is what I remember that may matter for %q (most relevant first):\n", query)
		} else {
			b.WriteString("Here is what I remember, most recent first:\n")
		}
		for _, m := range mems {
			fmt.Fprintf(&b, "\n- %s", m.Text)
			if len(m.Tags) > 0 {
				fmt.Fprintf(&b, " [%s]", strings.Join(m.Tags, ", "))
			}
			fmt.Fprintf(&b, " (%s)", ResourceURI(m.ID))
		}
		b.WriteString("\n\nUse these memories as context; memorySearch finds more.")
	}
	return capabilities.PromptResult{Description: desc, Messages: []capabilities.PromptMessage{{Role: "user", Content: capabilities.Text{Text: b.String()}}}}
}

// preview is the start of text, at most n runes.
func preview(text string, n int) string {
	r := []rune(text)
	if len(r) <= n {
		return text
	}
	return string(r[:n]) + "…"
}
