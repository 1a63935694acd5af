package codemode

import (
	"fmt"

	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/schedules"
)

// Wire plugs code mode into a server unless cfg.Disabled is set (the
// service is then nil): it builds the service and registers on
// cfg.Registry its capabilities and the provider of package exports, and
// in lanes the package job lane. (Its tables' retention is declared by
// the server whether or not it is on: RetentionPolicies.)
func Wire(cfg Config, lanes *schedules.Set) (*Service, error) {
	if cfg.Disabled {
		return nil, nil
	}
	svc, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := cfg.Registry.AddProvider(ExportPrefix, svc.Provider()); err != nil {
		return nil, err
	}
	if err := cfg.Registry.Register(svc.Capabilities()...); err != nil {
		return nil, fmt.Errorf("register code mode: %w", err)
	}
	if err := lanes.Add(svc.Schedule()); err != nil {
		return nil, err
	}
	return svc, nil
}

// QuotaLimits puts execute, packageSave and every package export in the
// quota class of code runs (QuotaClass), limited to DefaultDailyRuns a day
// unless l already sets that class's limit (--quota execute=N/day).
func QuotaLimits(l quota.Limits) quota.Limits {
	// packageRun calls the export's own capability, which counts; a save
	// counts too (each stores up to 1 MiB of sources).
	return l.WithDefaultClass(QuotaClass, DefaultDailyRuns, "execute", "packageSave", ExportPrefix+"*")
}
