// Package cli is the enclave command line: flags and ENCLAVE_* environment
// variables become an enclave.Config, and subcommands act on it. It holds no
// logic a library user needs; cmd/enclave only adds signal handling and the
// cloud drivers. The account commands act through the server's registry:
// each invokes an operator capability with capabilities.OperatorCaller, so
// the choke point checks and audits it like any other call.
package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/enclave-mcp/enclave"
	"github.com/enclave-mcp/enclave/accounts"
	"github.com/enclave-mcp/enclave/buckets"
	"github.com/enclave-mcp/enclave/capabilities/outbound"
	"github.com/enclave-mcp/enclave/events"
	"github.com/enclave-mcp/enclave/federation"
	"github.com/enclave-mcp/enclave/integrations"
	"github.com/enclave-mcp/enclave/internal/tracing/otlpexport"
	"github.com/enclave-mcp/enclave/internal/version"
	"github.com/enclave-mcp/enclave/mail"
	"github.com/enclave-mcp/enclave/mail/mailauth"
	"github.com/enclave-mcp/enclave/migrations"
	"github.com/enclave-mcp/enclave/oauth"
	"github.com/enclave-mcp/enclave/quota"
	"github.com/enclave-mcp/enclave/storage"
	"github.com/enclave-mcp/enclave/workspaces"
)

// Env is what a command may touch of the outside world.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv reads environment variables (os.Getenv in the binary).
	Getenv func(string) string
}

type command struct {
	name    string // "serve", or "admin grant" for a nested command
	args    string // usage after the flags, e.g. "EMAIL"
	summary string
	run     func(ctx context.Context, e *Env, o *options, args []string) error
	// flags registers the command's own flags, if any.
	flags func(fs *flag.FlagSet)
}

// commands is the command table. Keep it sorted by name.
func commands() []command {
	return []command{
		{name: "admin grant", args: "EMAIL", summary: "give an account the admin role", run: runAdminGrant},
		{name: "admin revoke", args: "EMAIL", summary: "take the admin role from an account (never the last admin)", run: runAdminRevoke},
		backupCommand(),
		exportCommand(),
		healthcheckCommand(),
		{name: "keys rotate", summary: "make new data and session keys and re-encrypt every secret", run: runKeysRotate},
		{name: "migrate", summary: "apply pending database migrations and exit", run: runMigrate},
		{name: "migrate status", summary: "list applied and pending migrations (exit 1 when any is pending)", run: runMigrateStatus},
		restoreCommand(),
		{name: "serve", summary: "run the server (migrates first, unless --no-migrate)", run: runServe},
		userCreate(),
		{name: "user delete", args: "EMAIL", summary: "delete an account and everything it owns (retry after a failure)", run: runUserDelete},
		{name: "user suspend", args: "EMAIL", summary: "suspend an account: refused everywhere until unsuspended", run: runUserSuspend},
		{name: "user unsuspend", args: "EMAIL", summary: "lift an account's suspension", run: runUserUnsuspend},
		{name: "version", summary: "print the version", run: runVersion},
	}
}

// errUsage marks an error that is the caller's mistake: exit status 2.
var errUsage = errors.New("usage")

// Main runs the command line in args (without the program name) and returns
// the process exit status.
func Main(ctx context.Context, args []string, e *Env) int {
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = append([]string{"version"}, args[1:]...)
	}
	cmd, rest, ok := lookup(args)
	if !ok {
		usage(e.Stderr, args)
		if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
			return 0
		}
		return 2
	}
	fs := flag.NewFlagSet("enclave "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(e.Stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.Stderr, "usage: enclave %s [flags] %s\n\n%s\n\nflags (each also read from ENCLAVE_<NAME>):\n", cmd.name, cmd.args, cmd.summary)
		fs.PrintDefaults()
	}
	o := &options{}
	o.register(fs)
	if cmd.flags != nil {
		cmd.flags(fs)
	}
	if err := applyEnv(fs, e.Getenv); err != nil {
		fmt.Fprintf(e.Stderr, "enclave: %v\n", err)
		return 2
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if err := o.finish(e.Stderr); err != nil {
		fmt.Fprintf(e.Stderr, "enclave: %v\n", err)
		return 2
	}
	if err := cmd.run(ctx, e, o, fs.Args()); err != nil {
		fmt.Fprintf(e.Stderr, "enclave %s: %v\n", cmd.name, err)
		if errors.Is(err, errUsage) {
			return 2
		}
		return 1
	}
	return 0
}

// lookup finds the longest command name that prefixes args.
func lookup(args []string) (command, []string, bool) {
	for n := min(2, len(args)); n >= 1; n-- {
		name := strings.Join(args[:n], " ")
		for _, c := range commands() {
			if c.name == name {
				return c, args[n:], true
			}
		}
	}
	return command{}, nil, false
}

func usage(w io.Writer, args []string) {
	if len(args) > 0 && args[0] != "help" && args[0] != "-h" && args[0] != "--help" {
		fmt.Fprintf(w, "enclave: unknown command %q\n\n", strings.Join(args, " "))
	}
	fmt.Fprintln(w, "usage: enclave COMMAND [flags]\n\ncommands:")
	cmds := commands()
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-22s %s\n", strings.TrimSpace(c.name+" "+c.args), c.summary)
	}
	fmt.Fprintln(w, "\nRun 'enclave COMMAND -h' for a command's flags.")
}

// options are the flags every command shares.
type options struct {
	cfg       enclave.Config
	logFormat string
	logLevel  string
	log       *slog.Logger

	signup         string
	allowedOrigins string
	quota          string
	quotaClass     string

	smtp           mail.SMTPConfig
	smtpURL        string
	smtpSecurity   string
	trustedProxies string
	callerCacheTTL time.Duration
	workspaces     bool
	codeMode       bool
	codeMemoryMiB  int
	storageBytes   byteSize
	otlpEndpoint   string
	otlpHeader     string

	integrations     []string // --integration, repeatable
	integrationsFile string
	enterpriseIdPs   []string // --enterprise-idp, repeatable
	enterpriseFile   string
	signInProviders  []string
	signInFile       string
	smtpTLSCert      string
	smtpTLSKey       string
	mailDKIM         bool
	mailSPF          bool
	mailDMARC        bool
}

// sharedFlags lists the flags read from ENCLAVE_* variables.
var sharedFlags = []string{"addr", "data-dir", "base-url", "database-url", "blob-url", "kv-url", "queue-url", "keeper-url", "bus-url", "production", "log-format",
	"log-level", "metrics-addr", "shutdown-timeout", "caller-cache-ttl", "no-migrate", "signup", "require-admin-2fa", "workspaces", "allowed-origins",
	"trusted-proxies", "quota", "quota-class", "webhook-allow-private", "denial-burst-threshold", "denial-burst-window", "denial-burst-cooldown", "smtp-url", "smtp-addr", "smtp-from", "smtp-username", "smtp-password", "smtp-security",
	"code-mode", "code-memory-mib", "code-timeout", "code-stack", "code-result-bytes", "code-log-bytes", "code-host-calls", "code-runs-per-user", "code-runs-total", "code-max-jobs",
	"storage-max-bytes", "storage-max-keys", "embeddings-url", "embeddings-model", "embeddings-key-file",
	"integrations-file", "sign-in-providers-file", "site-name", "site-description", "site-accent", "otlp-endpoint", "otlp-header",
	"smtp-listen", "mail-domain", "smtp-tls-cert", "smtp-tls-key", "mail-receives-per-day", "mail-sends-per-day", "mail-dkim", "mail-spf", "mail-dmarc",
	"enterprise-idps-file", "enterprise-idp-allow-private"}

// secretFlags may also be read from a file named by ENCLAVE_<NAME>_FILE
// (a mounted Docker or systemd secret), so the value is in no environment
// and no process listing.
var secretFlags = []string{"database-url", "blob-url", "kv-url", "queue-url", "keeper-url", "bus-url", "smtp-url", "smtp-password", "otlp-header"}

func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.cfg.Addr, "addr", enclave.DefaultAddr, "listen address")
	fs.StringVar(&o.cfg.DataDir, "data-dir", "./enclave-data", "directory for the embedded defaults (SQLite file, blobs, keeper key)")
	fs.StringVar(&o.cfg.BaseURL, "base-url", "", "public URL of the server (default http://<addr>)")
	fs.StringVar(&o.cfg.DatabaseURL, "database-url", "", "sqlite://PATH or postgres://… (default sqlite://<data-dir>/enclave.db)")
	fs.StringVar(&o.cfg.BlobURL, "blob-url", "", "blob bucket URL: file://, mem://, s3://, gs://, azblob:// (default file://<data-dir>/blobs)")
	fs.StringVar(&o.cfg.KVURL, "kv-url", "", "KV (cache) collection URL (default in-memory)")
	fs.StringVar(&o.cfg.QueueURL, "queue-url", "", "queue topic URL (default in-process)")
	fs.StringVar(&o.cfg.KeeperURL, "keeper-url", "", "secrets keeper URL (default a key kept in <data-dir>/keeper.key)")
	fs.StringVar(&o.cfg.BusURL, "bus-url", "", "cluster bus linking replicas: local, postgres (LISTEN/NOTIFY) or nats://HOST:PORT (built with -tags nats; default postgres with a postgres:// database, local otherwise)")
	fs.BoolVar(&o.cfg.Production, "production", false, "production mode: require an https base URL, no development routes")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.logLevel, "log-level", "info", "lowest level logged: debug, info, warn or error")
	fs.StringVar(&o.cfg.MetricsAddr, "metrics-addr", "", "address for Prometheus metrics (GET /metrics) on a listener of their own, e.g. 127.0.0.1:9090 (default off)")
	fs.StringVar(&o.otlpEndpoint, "otlp-endpoint", "", "send OpenTelemetry traces (HTTP requests, MCP methods, capability calls, SQL, outbound requests) to this OTLP/HTTP collector URL, e.g. http://localhost:4318 (default off; see docs/tracing.md)")
	fs.StringVar(&o.otlpHeader, "otlp-header", "", "headers sent with every trace export, as key=value,key2=value2 (an API key, say); OTEL_EXPORTER_OTLP_HEADERS is also read")
	fs.DurationVar(&o.cfg.ShutdownTimeout, "shutdown-timeout", 15*time.Second, "on SIGTERM, how long calls in flight may take to finish")
	fs.DurationVar(&o.callerCacheTTL, "caller-cache-ttl", 30*time.Second, "longest a verified token's caller (roles, permissions, account state) is reused without the SQL bearer check; changes drop it at once on every replica; 0 turns the cache off")
	fs.BoolVar(&o.cfg.NoMigrate, "no-migrate", false, "serve without applying migrations (apply them with enclave migrate; /readyz is 503 while any is pending)")
	fs.StringVar(&o.signup, "signup", "open", "who may create an account: open, invite (an admin's invite code) or closed (CLI only)")
	fs.BoolVar(&o.cfg.RequireAdmin2FA, "require-admin-2fa", false, "require admins to have a second factor (authenticator app or passkey): admin pages send them to enrolment and admin capabilities refuse until they have one")
	fs.BoolVar(&o.workspaces, "workspaces", false, "turn on shared workspaces: their capabilities (workspaceCreate, members, invitations, files, API keys) and the /workspaces pages")
	fs.BoolVar(&o.codeMode, "code-mode", true, "code mode: the execute capability (JavaScript in a sandbox, calling capabilities with the caller's authority), saved packages whose exports become their owner's tools, package jobs; --code-mode=false turns it off")
	fs.IntVar(&o.codeMemoryMiB, "code-memory-mib", 64, "memory of one code run, in MiB")
	fs.DurationVar(&o.cfg.CodeMode.Limits.Timeout, "code-timeout", 30*time.Second, "wall time of one code run")
	fs.IntVar(&o.cfg.CodeMode.Limits.Stack, "code-stack", 0, "JavaScript stack depth of one code run, in engine stack slots (0: the sandbox's default)")
	fs.IntVar(&o.cfg.CodeMode.Limits.Result, "code-result-bytes", 1<<20, "largest JSON result of one code run, in bytes")
	fs.IntVar(&o.cfg.CodeMode.Limits.Logs, "code-log-bytes", 64<<10, "console output of one code run kept, in bytes (the rest is dropped)")
	fs.IntVar(&o.cfg.CodeMode.Limits.HostCalls, "code-host-calls", 1000, "capability, fetch and storage calls one code run may make")
	fs.IntVar(&o.cfg.CodeMode.PerUser, "code-runs-per-user", 4, "code runs of one user at once (more wait, then are refused as busy)")
	fs.IntVar(&o.cfg.CodeMode.Total, "code-runs-total", 0, "code runs of this process at once (0: 4 × GOMAXPROCS, at least 4)")
	fs.IntVar(&o.cfg.CodeMode.MaxJobs, "code-max-jobs", 10, "scheduled package jobs per user, across their packages")
	o.storageBytes = buckets.DefaultMaxBytes
	fs.Var(&o.storageBytes, "storage-max-bytes", "each user's storage bucket budget: bytes of keys and values across all their buckets, as a number or with KiB, MiB or GiB")
	fs.Int64Var(&o.cfg.Buckets.MaxKeys, "storage-max-keys", buckets.DefaultMaxKeys, "each user's most storage bucket keys, across all their buckets")
	fs.StringVar(&o.cfg.Memory.Embeddings.URL, "embeddings-url", "", "base URL of an OpenAI-compatible embeddings API (POST <url>/embeddings), e.g. https://api.openai.com/v1: memory search then ranks by meaning too (default off: full-text search only)")
	fs.StringVar(&o.cfg.Memory.Embeddings.Model, "embeddings-model", "", "the embedding model, e.g. text-embedding-3-small (required with --embeddings-url); changing it re-embeds every memory in the background")
	fs.Func("integration", "an OAuth provider people may connect accounts at (repeatable): NAME=issuer=URL or auth-url=URL,token-url=URL[,revoke-url=URL],client-id=ID[,client-secret-file=FILE][,scopes=A B][,hosts=api.example.com ...]; its tokens go only to hosts", func(v string) error {
		o.integrations = append(o.integrations, v)
		return nil
	})
	fs.Func("sign-in-provider", "an identity provider people may sign in and sign up with (repeatable): NAME=issuer=URL,client-id=ID[,client-secret-file=FILE][,label=TEXT][,scopes=A B][,trust-mfa=true]; the names google, github and microsoft (with tenant=T) are presets needing no issuer", func(v string) error {
		o.signInProviders = append(o.signInProviders, v)
		return nil
	})
	fs.StringVar(&o.signInFile, "sign-in-providers-file", "", "a JSON file holding an array of sign-in providers (name, label, issuer, tenant, clientId, clientSecretFile, scopes, trustMfa), besides --sign-in-provider")
	fs.StringVar(&o.integrationsFile, "integrations-file", "", "a JSON file holding an array of OAuth providers (name, issuer or authUrl and tokenUrl, revokeUrl, clientId, clientSecretFile, scopes, apiHosts), besides --integration")
	fs.Func("enterprise-idp", "an enterprise identity provider whose ID-JAGs agents may redeem for tokens with the JWT bearer grant (repeatable): issuer=URL,jwks-url=URL[,client-ids=ID ID ...][,email-domains=D D ...] (email-domains: the domains whose verified addresses it may link accounts by; default none: the grant is off; see docs/oauth.md)", func(v string) error {
		o.enterpriseIdPs = append(o.enterpriseIdPs, v)
		return nil
	})
	fs.StringVar(&o.enterpriseFile, "enterprise-idps-file", "", "a JSON file holding an array of enterprise identity providers (issuer, jwksUrl, clientIds, emailDomains), besides --enterprise-idp")
	fs.BoolVar(&o.cfg.OAuth.Enterprise.AllowPrivate, "enterprise-idp-allow-private", false, "let enterprise IdP key sets be fetched from private and loopback addresses (an IdP on your own network); https is still required")
	fs.StringVar(&o.cfg.Memory.Embeddings.KeyFile, "embeddings-key-file", "", "file holding the embeddings API key, sent as a Bearer token (default none)")
	fs.StringVar(&o.allowedOrigins, "allowed-origins", "", "comma-separated browser origins, besides the server's own, allowed to call /mcp and the OAuth endpoints (Origin check and CORS), e.g. https://app.example.com")
	fs.StringVar(&o.trustedProxies, "trusted-proxies", "", "comma-separated networks of reverse proxies whose X-Forwarded-For is believed (e.g. 10.0.0.0/8)")
	fs.StringVar(&o.quota, "quota", "", "comma-separated daily call limits per user per capability class, CLASS=N/day (UTC days), e.g. default=5000/day,search=200/day (default unlimited)")
	fs.StringVar(&o.quotaClass, "quota-class", "", "comma-separated CAPABILITY=CLASS assigning capabilities to quota classes (every other capability is in class default)")
	fs.BoolVar(&o.cfg.WebhookAllowPrivate, "webhook-allow-private", false, "let webhook subscriptions target private, loopback and link-local addresses (tests, targets on your own network); https is still required")
	fs.IntVar(&o.cfg.DenialBurst.Threshold, "denial-burst-threshold", events.DefaultBurstThreshold, "denials of one user or client network within --denial-burst-window that publish security.denial_burst")
	fs.DurationVar(&o.cfg.DenialBurst.Window, "denial-burst-window", events.DefaultBurstWindow, "the window denial bursts are counted in")
	fs.DurationVar(&o.cfg.DenialBurst.Cooldown, "denial-burst-cooldown", events.DefaultBurstCooldown, "how long a user or network that raised security.denial_burst stays quiet")
	fs.StringVar(&o.smtpURL, "smtp-url", "", "SMTP server as one URL: smtp://USER:PASS@HOST:587?tls=starttls|tls|none[&auth=xoauth2] (replaces --smtp-addr, --smtp-username, --smtp-password and --smtp-security)")
	fs.StringVar(&o.smtp.Addr, "smtp-addr", "", "SMTP server host:port for verification and reset mail (required with --production)")
	fs.StringVar(&o.smtp.From, "smtp-from", "", "sender address of that mail")
	fs.StringVar(&o.smtp.Username, "smtp-username", "", "SMTP user (AUTH PLAIN, only over TLS or to a loopback relay)")
	fs.StringVar(&o.smtp.Password, "smtp-password", "", "SMTP password (prefer ENCLAVE_SMTP_PASSWORD_FILE)")
	fs.StringVar(&o.smtpSecurity, "smtp-security", "starttls", "starttls, tls, or plain (loopback relays only)")
	fs.StringVar(&o.cfg.SiteName, "site-name", "enclave", "the service's name in page titles, mail, the start and connect pages, the consent page and authenticator apps")
	fs.StringVar(&o.cfg.SiteDescription, "site-description", "", "the sentence the start page shows under the site name: what this server is for (default a generic one)")
	fs.StringVar(&o.cfg.AccentColor, "site-accent", "", "the pages' accent colour, #rrggbb (default the built-in blue)")
	fs.StringVar(&o.cfg.Mail.SMTPListen, "smtp-listen", "", "address of the inbound SMTP listener receiving users' mail, e.g. :25 (default off; needs --mail-domain)")
	fs.StringVar(&o.cfg.Mail.Domain, "mail-domain", "", "the mail domain D: each user receives mail at USERNAME@D and USERNAME+TAG@D; reserved names (postmaster, abuse, ...) go to system mailboxes admins read")
	fs.StringVar(&o.smtpTLSCert, "smtp-tls-cert", "", "PEM certificate chain the SMTP listener offers with STARTTLS (with --smtp-tls-key; default no STARTTLS)")
	fs.StringVar(&o.smtpTLSKey, "smtp-tls-key", "", "PEM private key of --smtp-tls-cert")
	fs.BoolVar(&o.mailDKIM, "mail-dkim", true, "verify inbound mail's DKIM signatures and quarantine a message whose signatures all fail (--mail-dkim=false: record nothing, quarantine nothing)")
	fs.BoolVar(&o.mailSPF, "mail-spf", true, "check inbound mail's SPF (the SMTP client's address for the envelope sender's domain); a hard fail (-all) quarantines a message unless DMARC passes")
	fs.BoolVar(&o.mailDMARC, "mail-dmarc", true, "check inbound mail's DMARC: the From domain aligned with a passing DKIM signature or SPF; a failing message of a domain whose policy is quarantine or reject is quarantined")
	fs.Int64Var(&o.cfg.Mail.ReceivesPerDay, "mail-receives-per-day", mail.DefaultReceivesPerDay, "messages one user's mailbox accepts per UTC day; more are refused with a temporary error (-1: unlimited)")
	fs.Int64Var(&o.cfg.Mail.SendsPerDay, "mail-sends-per-day", mail.DefaultSendsPerDay, "messages one user may send per UTC day with mailSend (quota class mail_send; a plan may limit it too; -1: unlimited)")
}

// applyEnv sets each shared flag from ENCLAVE_<NAME> when that variable is
// set; flags given on the command line are parsed afterwards and win.
func applyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	for _, name := range secretFlags {
		key := envName(name)
		file := getenv(key + "_FILE")
		if file == "" {
			continue
		}
		if getenv(key) != "" {
			return fmt.Errorf("both %s and %s_FILE are set; keep one", key, key)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("%s_FILE: %w", key, err)
		}
		if err := fs.Set(name, strings.TrimRight(string(data), "\r\n")); err != nil {
			return fmt.Errorf("%s_FILE=%q: %w", key, file, err)
		}
	}
	for _, name := range sharedFlags {
		key := envName(name)
		if v := getenv(key); v != "" {
			if err := fs.Set(name, v); err != nil {
				return fmt.Errorf("%s=%q: %w", key, v, err)
			}
		}
	}
	return nil
}

// envName is the environment variable of a flag: ENCLAVE_ + NAME.
func envName(flag string) string {
	return "ENCLAVE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

func (o *options) finish(stderr io.Writer) error {
	if o.otlpEndpoint != "" {
		if err := otlpexport.CheckEndpoint(o.otlpEndpoint); err != nil {
			return fmt.Errorf("--otlp-endpoint: %w", err)
		}
	}
	if _, err := otlpexport.ParseHeaders(o.otlpHeader); err != nil {
		return fmt.Errorf("--otlp-header: %w", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	var h slog.Handler
	switch o.logFormat {
	case "text":
		h = slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})
	case "json":
		h = slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level})
	default:
		return fmt.Errorf("--log-format %q: want text or json", o.logFormat)
	}
	o.log = slog.New(h)
	o.cfg.Logger = o.log
	switch {
	case o.callerCacheTTL < 0:
		return fmt.Errorf("--caller-cache-ttl %s: want 0 (off) or a positive duration", o.callerCacheTTL)
	case o.callerCacheTTL == 0:
		o.cfg.CallerCacheTTL = -1 // off
	default:
		o.cfg.CallerCacheTTL = o.callerCacheTTL
	}
	if o.workspaces && o.cfg.Workspaces == nil {
		o.cfg.Workspaces = &workspaces.Options{}
	}
	o.cfg.CodeMode.Disabled = !o.codeMode
	if (o.smtpTLSCert == "") != (o.smtpTLSKey == "") {
		return errors.New("--smtp-tls-cert and --smtp-tls-key go together")
	}
	if o.smtpTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(o.smtpTLSCert, o.smtpTLSKey)
		if err != nil {
			return fmt.Errorf("--smtp-tls-cert: %w", err)
		}
		o.cfg.Mail.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if o.mailDKIM || o.mailSPF || o.mailDMARC {
		o.cfg.Mail.Authenticate = mailauth.Check(mailauth.Options{NoDKIM: !o.mailDKIM, NoSPF: !o.mailSPF, NoDMARC: !o.mailDMARC})
	}
	if o.cfg.Mail.SMTPListen != "" && o.cfg.Mail.Domain == "" {
		return errors.New("--smtp-listen needs --mail-domain: the domain whose addresses the listener accepts")
	}
	if o.codeMemoryMiB < 1 || o.codeMemoryMiB > 4096 {
		return fmt.Errorf("--code-memory-mib %d: want 1 to 4096", o.codeMemoryMiB)
	}
	o.cfg.CodeMode.Limits.Memory = int64(o.codeMemoryMiB) << 20
	for name, v := range map[string]int{"--code-stack": o.cfg.CodeMode.Limits.Stack, "--code-result-bytes": o.cfg.CodeMode.Limits.Result,
		"--code-log-bytes": o.cfg.CodeMode.Limits.Logs, "--code-host-calls": o.cfg.CodeMode.Limits.HostCalls,
		"--code-runs-per-user": o.cfg.CodeMode.PerUser, "--code-runs-total": o.cfg.CodeMode.Total, "--code-max-jobs": o.cfg.CodeMode.MaxJobs} {
		if v < 0 {
			return fmt.Errorf("%s %d: want a positive number", name, v)
		}
	}
	if o.cfg.CodeMode.Limits.Timeout < 0 {
		return fmt.Errorf("--code-timeout %s: want a positive duration", o.cfg.CodeMode.Limits.Timeout)
	}
	if o.storageBytes < 1 || o.cfg.Buckets.MaxKeys < 1 {
		return fmt.Errorf("--storage-max-bytes and --storage-max-keys: want positive numbers")
	}
	o.cfg.Buckets.MaxBytes = int64(o.storageBytes)
	if e := o.cfg.Memory.Embeddings; (e.URL == "") != (e.Model == "") || e.KeyFile != "" && e.URL == "" {
		return fmt.Errorf("--embeddings-url and --embeddings-model go together (and --embeddings-key-file needs them)")
	}
	mode, err := accounts.ParseSignupMode(o.signup)
	if err != nil {
		return fmt.Errorf("--signup: %w", err)
	}
	o.cfg.Signup = mode
	for _, p := range strings.Split(o.trustedProxies, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		prefix, err := netip.ParsePrefix(p)
		if err != nil {
			return fmt.Errorf("--trusted-proxies %q: want networks such as 10.0.0.0/8", p)
		}
		o.cfg.TrustedProxies = append(o.cfg.TrustedProxies, prefix)
	}
	for _, origin := range strings.Split(o.allowedOrigins, ",") {
		if origin = strings.TrimSpace(origin); origin == "" {
			continue
		}
		u, err := url.Parse(origin)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
			strings.Trim(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("--allowed-origins %q: want origins such as https://app.example.com", origin)
		}
		o.cfg.AllowedOrigins = append(o.cfg.AllowedOrigins, strings.TrimSuffix(origin, "/"))
	}
	if o.cfg.QuotaLimits, err = parseQuota(o.quota, o.quotaClass); err != nil {
		return err
	}
	if o.integrationsFile != "" {
		ps, err := integrations.LoadProviders(o.integrationsFile)
		if err != nil {
			return err
		}
		o.cfg.Integrations.Providers = append(o.cfg.Integrations.Providers, ps...)
	}
	if o.signInFile != "" {
		ps, err := federation.LoadProviders(o.signInFile)
		if err != nil {
			return err
		}
		o.cfg.SignInProviders = append(o.cfg.SignInProviders, ps...)
	}
	for _, v := range o.signInProviders {
		p, err := federation.ParseProviderFlag(v)
		if err != nil {
			return err
		}
		o.cfg.SignInProviders = append(o.cfg.SignInProviders, p)
	}
	for _, v := range o.integrations {
		p, err := integrations.ParseProviderFlag(v)
		if err != nil {
			return err
		}
		o.cfg.Integrations.Providers = append(o.cfg.Integrations.Providers, p)
	}
	if o.enterpriseFile != "" {
		idps, err := oauth.LoadTrustedIdPs(o.enterpriseFile)
		if err != nil {
			return fmt.Errorf("--enterprise-idps-file: %w", err)
		}
		o.cfg.OAuth.Enterprise.IdPs = append(o.cfg.OAuth.Enterprise.IdPs, idps...)
	}
	for _, v := range o.enterpriseIdPs {
		idp, err := oauth.ParseTrustedIdP(v)
		if err != nil {
			return fmt.Errorf("--enterprise-idp %q: %w", v, err)
		}
		o.cfg.OAuth.Enterprise.IdPs = append(o.cfg.OAuth.Enterprise.IdPs, idp)
	}
	if o.smtpURL != "" {
		if o.smtp.Addr != "" {
			return errors.New("--smtp-url and --smtp-addr are both set; keep one")
		}
		c, err := mail.ParseSMTPURL(o.smtpURL)
		if err != nil {
			return err
		}
		c.From = o.smtp.From
		m, err := mail.NewSMTPMailer(c)
		if err != nil {
			return err
		}
		o.cfg.Mailer = m
	} else if o.smtp.Addr != "" {
		switch o.smtpSecurity {
		case "starttls":
			o.smtp.Security = mail.SMTPStartTLS
		case "tls":
			o.smtp.Security = mail.SMTPImplicitTLS
		case "plain":
			o.smtp.Security = mail.SMTPPlaintext
		default:
			return fmt.Errorf("--smtp-security %q: want starttls, tls or plain", o.smtpSecurity)
		}
		m, err := mail.NewSMTPMailer(o.smtp)
		if err != nil {
			return err
		}
		o.cfg.Mailer = m
	}
	return nil
}

// openStore opens the configured stores and applies pending migrations, for
// commands that act on the data without serving.
func (o *options) openStore(ctx context.Context) (*storage.Store, error) {
	s, err := storage.Open(ctx, storage.Config{
		DataDir:     o.cfg.DataDir,
		DatabaseURL: o.cfg.DatabaseURL,
		BlobURL:     o.cfg.BlobURL,
		KVURL:       o.cfg.KVURL,
		QueueURL:    o.cfg.QueueURL,
		KeeperURL:   o.cfg.KeeperURL,
		Logger:      o.log,
	})
	if err != nil {
		return nil, err
	}
	if _, err := migrations.Apply(ctx, s.DB); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Version returns the release version (see package internal/version; a
// release build sets it with -ldflags "-X
// github.com/enclave-mcp/enclave/internal/version.version=v1.2.3").
func Version() string { return version.String() }

func runVersion(_ context.Context, e *Env, _ *options, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: version takes no arguments", errUsage)
	}
	printVersion(e.Stdout)
	return nil
}

func runMigrate(ctx context.Context, e *Env, o *options, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: migrate takes no arguments", errUsage)
	}
	s, err := storage.Open(ctx, storage.Config{
		DataDir: o.cfg.DataDir, DatabaseURL: o.cfg.DatabaseURL, BlobURL: o.cfg.BlobURL,
		KVURL: o.cfg.KVURL, QueueURL: o.cfg.QueueURL, KeeperURL: o.cfg.KeeperURL, Logger: o.log,
	})
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := migrations.Apply(ctx, s.DB)
	if err != nil {
		return err
	}
	for _, m := range res.Applied {
		fmt.Fprintf(e.Stdout, "applied %04d_%s\n", m.Version, m.Name)
	}
	if len(res.Applied) == 0 {
		fmt.Fprintln(e.Stdout, "database is up to date")
	}
	fmt.Fprintf(e.Stdout, "schema version %d\n", res.Current)
	if len(res.Unknown) > 0 {
		fmt.Fprintf(e.Stdout, "note: the database also has versions %v, applied by a newer release\n", res.Unknown)
	}
	return nil
}

// parseQuota reads --quota (CLASS=N/day, comma-separated) and --quota-class
// (CAPABILITY=CLASS, comma-separated) into quota limits.
func parseQuota(limits, classes string) (quota.Limits, error) {
	var l quota.Limits
	for _, e := range strings.Split(limits, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		class, n, ok := strings.Cut(e, "=")
		class, n = strings.TrimSpace(class), strings.TrimSpace(n)
		n = strings.TrimSuffix(n, "/day")
		calls, err := strconv.ParseInt(n, 10, 64)
		if !ok || class == "" || err != nil || calls < 0 {
			return quota.Limits{}, fmt.Errorf("--quota %q: want CLASS=N/day, e.g. default=5000/day (limits are per user per UTC day)", e)
		}
		if l.Daily == nil {
			l.Daily = map[string]int64{}
		}
		if _, dup := l.Daily[class]; dup {
			return quota.Limits{}, fmt.Errorf("--quota: class %q is limited twice", class)
		}
		l.Daily[class] = calls
	}
	for _, e := range strings.Split(classes, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		name, class, ok := strings.Cut(e, "=")
		name, class = strings.TrimSpace(name), strings.TrimSpace(class)
		if !ok || name == "" || class == "" {
			return quota.Limits{}, fmt.Errorf("--quota-class %q: want CAPABILITY=CLASS, e.g. webSearch=search", e)
		}
		if _, limited := l.Daily[class]; !limited {
			// A class --quota does not limit is unlimited: a typo here
			// would silently lift the quota of these capabilities.
			return quota.Limits{}, fmt.Errorf("--quota-class %q: class %q has no --quota limit (give it one, e.g. --quota %s=N/day)", e, class, class)
		}
		if l.Classes == nil {
			l.Classes = map[string]string{}
		}
		if _, dup := l.Classes[name]; dup {
			return quota.Limits{}, fmt.Errorf("--quota-class: capability %q is assigned twice", name)
		}
		l.Classes[name] = class
	}
	// A limited class that holds no capability (Default for default, or
	// one --quota-class never names) would limit nothing, silently.
	for class := range l.Daily {
		if class == outbound.QuotaClass { // the outbound gateway's requests (see docs/data.md)
			if l.Daily[class] < 1 {
				return quota.Limits{}, fmt.Errorf("--quota: class %s needs at least 1/day", class)
			}
			continue
		}
		if class != quota.DefaultClass && !slices.Contains(slices.Collect(maps.Values(l.Classes)), class) {
			return quota.Limits{}, fmt.Errorf("--quota: class %q holds no capability (every capability is in class %s unless --quota-class assigns it)", class, quota.DefaultClass)
		}
	}
	return l, nil
}
