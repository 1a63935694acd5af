package capabilities

import (
	"cmp"
	"context"
	"fmt"
	"slices"
)

// Prompt is a prompt template a client can offer its user. Prompts are
// read-only and guarded like capabilities.
type Prompt struct {
	Name        string
	Title       string
	Description string
	Arguments   []PromptArgument
	Requires    Requirement
	Get         func(ctx context.Context, call *Call, args map[string]string) (PromptResult, error)
	// Complete, optional, suggests values for an argument.
	Complete func(ctx context.Context, call *Call, arg, prefix string) ([]string, error)
}

// PromptArgument is one argument of a prompt.
type PromptArgument struct {
	Name, Description string
	Required          bool
}

// PromptResult is a rendered prompt.
type PromptResult struct {
	Description string
	Messages    []PromptMessage
}

// PromptMessage is one message of a rendered prompt.
type PromptMessage struct {
	Role    string // "user" or "assistant"
	Content Content
}

// RegisterPrompt adds prompts. It refuses invalid definitions and
// duplicates; nothing is added when any of them is refused.
func (r *Registry) RegisterPrompt(prompts ...Prompt) error {
	staged := make([]*Prompt, 0, len(prompts))
	seen := map[string]bool{}
	for _, p := range prompts {
		switch {
		case p.Name == "":
			return fmt.Errorf("capabilities: register prompt: name is required")
		case p.Get == nil:
			return fmt.Errorf("capabilities: register prompt %q: get is required", p.Name)
		case seen[p.Name]:
			return fmt.Errorf("capabilities: register prompt %q: defined twice", p.Name)
		}
		seen[p.Name] = true
		staged = append(staged, &p)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range staged {
		if _, ok := r.prompts[p.Name]; ok {
			return fmt.Errorf("capabilities: register prompt %q: already registered", p.Name)
		}
	}
	for _, p := range staged {
		r.prompts[p.Name] = p
	}
	r.version++
	return nil
}

// VisiblePrompts returns the prompts caller may get, by name.
func (r *Registry) VisiblePrompts(ctx context.Context, caller Caller) []Prompt {
	r.mu.RLock()
	all := make([]*Prompt, 0, len(r.prompts))
	for _, p := range r.prompts {
		all = append(all, p)
	}
	r.mu.RUnlock()
	slices.SortFunc(all, func(a, b *Prompt) int { return cmp.Compare(a.Name, b.Name) })
	var out []Prompt
	for _, p := range all {
		if r.listed(ctx, caller, "", true, p.Requires) {
			out = append(out, *p)
		}
	}
	return out
}

func (r *Registry) admitPrompt(ctx context.Context, caller Caller, name string) (*Prompt, error) {
	r.mu.RLock()
	p, ok := r.prompts[name]
	r.mu.RUnlock()
	if !ok {
		r.deny(ctx, caller, "prompt", name, ReasonUnknown)
		return nil, errNotFound("prompt", name)
	}
	if err := r.admit(ctx, caller, "prompt", name, true, p.Requires); err != nil {
		return nil, err
	}
	return p, nil
}

// GetPrompt renders a prompt through the same guard as Invoke. Missing
// required arguments are CodeInvalidInput.
func (r *Registry) GetPrompt(ctx context.Context, caller Caller, name string, args map[string]string) (PromptResult, error) {
	p, err := r.admitPrompt(ctx, caller, name)
	if err != nil {
		return PromptResult{}, err
	}
	for _, a := range p.Arguments {
		if _, ok := args[a.Name]; a.Required && !ok {
			return PromptResult{}, Errorf(CodeInvalidInput, "argument %q is required", a.Name)
		}
	}
	call := &Call{Caller: caller, Capability: name, client: clientFrom(ctx)}
	var out PromptResult
	_, err = r.run(ctx, name, func() (Result, error) {
		var err error
		out, err = p.Get(ctx, call, args)
		return Result{}, err
	})
	return out, err
}

// CompletePrompt suggests values for an argument of a visible prompt.
func (r *Registry) CompletePrompt(ctx context.Context, caller Caller, name, arg, prefix string) ([]string, error) {
	p, err := r.admitPrompt(ctx, caller, name)
	if err != nil || p.Complete == nil {
		return nil, err
	}
	call := &Call{Caller: caller, Capability: name, client: clientFrom(ctx)}
	var values []string
	_, err = r.run(ctx, name, func() (Result, error) {
		var err error
		values, err = p.Complete(ctx, call, arg, prefix)
		return Result{}, err
	})
	return values, err
}

// ScreenPrompt is Screen for prompts.
func (r *Registry) ScreenPrompt(ctx context.Context, caller Caller, name string) bool {
	r.mu.RLock()
	p, ok := r.prompts[name]
	r.mu.RUnlock()
	if !ok {
		r.deny(ctx, caller, "prompt", name, ReasonUnknown)
		return true
	}
	return r.screen(ctx, caller, "prompt", name, true, p.Requires)
}

// AllPrompts returns every registered prompt, by name, whoever may see it.
func (r *Registry) AllPrompts() []Prompt {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Prompt, 0, len(r.prompts))
	for _, p := range r.prompts {
		out = append(out, *p)
	}
	slices.SortFunc(out, func(a, b Prompt) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
