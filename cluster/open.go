package cluster

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
)

// OpenOptions choose and configure a bus for Open.
type OpenOptions struct {
	// BusURL names the bus explicitly: "local" (in process), "postgres"
	// (LISTEN/NOTIFY on DatabaseURL) or nats://host:port. Default: postgres
	// when DatabaseURL is a postgres:// URL, local otherwise.
	BusURL string
	// DatabaseURL is the deployment's database URL.
	DatabaseURL string
	// DB is the deployment's PostgreSQL pool, used to publish. Optional.
	DB *sql.DB
	// Logger receives connection losses and recoveries.
	Logger *slog.Logger
}

// IsPostgresURL reports whether u names a PostgreSQL database.
func IsPostgresURL(u string) bool {
	return strings.HasPrefix(u, "postgres://") || strings.HasPrefix(u, "postgresql://")
}

// Open returns the bus o names (see OpenOptions.BusURL).
func Open(ctx context.Context, o OpenOptions) (Bus, error) {
	switch {
	case o.BusURL == "local":
		return NewLocal(), nil
	case o.BusURL == "postgres" || (o.BusURL == "" && IsPostgresURL(o.DatabaseURL)):
		if !IsPostgresURL(o.DatabaseURL) {
			return nil, fmt.Errorf("cluster: bus %q needs a postgres:// database", o.BusURL)
		}
		return NewPostgres(ctx, PostgresOptions{DatabaseURL: o.DatabaseURL, DB: o.DB, Logger: o.Logger})
	case o.BusURL == "":
		return NewLocal(), nil
	case strings.HasPrefix(o.BusURL, "nats://") || strings.HasPrefix(o.BusURL, "tls://"):
		return openNATS(ctx, o)
	default:
		return nil, fmt.Errorf("cluster: bus URL: want local, postgres or nats://host:port")
	}
}
