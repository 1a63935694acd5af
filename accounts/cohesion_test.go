package accounts_test

import (
	"reflect"
	"testing"

	"github.com/enclave-mcp/enclave/accounts"
)

// methodBudget is the most exported methods each account service may have
// (#27): a reader should be able to hold one service in mind. A service
// that outgrows its budget is split, not given a bigger number.
var methodBudget = map[reflect.Type]int{
	reflect.TypeFor[*accounts.Service]():       12,
	reflect.TypeFor[*accounts.Identity]():      35,
	reflect.TypeFor[*accounts.Credentials]():   35,
	reflect.TypeFor[*accounts.SecondFactors](): 35,
	reflect.TypeFor[*accounts.Roles]():         35,
	reflect.TypeFor[*accounts.Lifecycle]():     35,
}

// The services stay within their method budgets, every service Service
// exposes has a budget, and no exported method is offered by two of them.
func TestServicesStayCohesive(t *testing.T) {
	svc := reflect.TypeFor[accounts.Service]()
	for i := range svc.NumField() {
		f := svc.Field(i)
		if !f.IsExported() {
			continue
		}
		if _, ok := methodBudget[f.Type]; !ok {
			t.Errorf("Service.%s (%s) has no method budget in methodBudget", f.Name, f.Type)
		}
	}
	owner := map[string]string{}
	for typ, budget := range methodBudget {
		var names []string
		for i := range typ.NumMethod() {
			names = append(names, typ.Method(i).Name)
		}
		if len(names) > budget {
			t.Errorf("%s has %d exported methods, over its budget of %d: split it by concern instead of raising the budget", typ, len(names), budget)
		}
		if len(names) == 0 {
			t.Errorf("%s has no exported methods", typ)
		}
		for _, n := range names {
			if o, dup := owner[n]; dup {
				t.Errorf("%s.%s is also %s.%s: one concern, one service", typ, n, o, n)
			}
			owner[n] = typ.String()
		}
	}
	// The services are reached as Service's fields, never promoted into it.
	for typ := range methodBudget {
		if typ == reflect.TypeFor[*accounts.Service]() {
			continue
		}
		for i := range typ.Elem().NumField() {
			if f := typ.Elem().Field(i); f.IsExported() {
				t.Errorf("%s exports field %s; services share state through the unexported core", typ, f.Name)
			}
		}
	}
}
