package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/winnet-io/winnet"
	"github.com/winnet-io/winnet/internal/memlimit"
)

// FlagSet returns the flag set of the command name: parsing returns errors rather than exiting, and
// -help prints usage followed by "Flags:" and every flag's default but those named in hidden.
func FlagSet(name, usage string, hidden ...string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage+"\n\nFlags:\n")
		shown := flag.NewFlagSet(name, flag.ContinueOnError)
		shown.SetOutput(fs.Output())
		fs.VisitAll(func(f *flag.Flag) {
			if !slices.Contains(hidden, f.Name) {
				shown.Var(f.Value, f.Name, f.Usage)
				shown.Lookup(f.Name).DefValue = f.DefValue
			}
		})
		shown.PrintDefaults()
	}
	return fs
}

// Parse parses args. help reports that -h or -help was given (the usage was printed): the command
// stops and succeeds. Any other error was printed with the usage.
func Parse(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, err
	}
	return false, nil
}

// NoArgs fails when fs was given positional arguments.
func NoArgs(fs *flag.FlagSet) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("%s takes no arguments, got %q", fs.Name(), fs.Args())
	}
	return nil
}

// KubeconfigFlag defines --kubeconfig on fs.
func KubeconfigFlag(fs *flag.FlagSet) *string {
	return fs.String("kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, the in-cluster config, then ~/.kube/config)")
}

// RESTConfig loads the kubeconfig at path, or, when path is empty, $KUBECONFIG, the in-cluster
// configuration, then ~/.kube/config. apiServer, when set, replaces the kubeconfig's server and must
// be an https://host:port URL.
func RESTConfig(path, apiServer string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if path == "" {
		cfg, err = ctrl.GetConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, err
	}
	if apiServer != "" {
		u, err := url.Parse(apiServer)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("--apiserver %q is not an https://host:port URL", apiServer)
		}
		cfg.Host = apiServer
	}
	return cfg, nil
}

// Subcommand runs run, the subcommand of the command, when it handles args (args start with its
// name): the process then ends, with status 1 and the error after prefix on stderr when it failed.
// It returns when run does not handle args.
func Subcommand(prefix string, args []string, run func(args []string) (handled bool, err error)) {
	handled, err := run(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, prefix+":", err)
		os.Exit(1)
	}
	if handled {
		os.Exit(0)
	}
}

// ParseMain parses a daemon's flags with zap's logging flags and --version bound to fs: on -help the
// process ends with status 0, on --version too once it printed the version line
// (winnet.BuildInfo.String), on a bad flag with 2 (the error and the usage printed). It then sets
// controller-runtime's logger from the logging flags, logs the build (version, revision, Go) and
// returns the logger, named after fs.
func ParseMain(fs *flag.FlagSet, args []string) logr.Logger {
	zopts := zap.Options{}
	zopts.BindFlags(fs)
	version := fs.Bool("version", false, "print the version and exit")
	if help, err := Parse(fs, args); help {
		os.Exit(0)
	} else if err != nil {
		os.Exit(2)
	}
	if *version {
		fmt.Println(winnet.Build().String(fs.Name()))
		os.Exit(0)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zopts)))
	log := ctrl.Log.WithName(fs.Name())
	b := winnet.Build()
	log.Info("Version", "version", b.Version, "revision", b.Revision, "goVersion", b.GoVersion)
	// The chart passes the container's memory limit (memlimit.EnvVar): the runtime collects harder
	// near it rather than the process being killed there.
	if limit, err := memlimit.Apply(os.Getenv); err != nil {
		log.Error(err, "Ignoring the container's memory limit")
	} else if limit > 0 {
		log.Info("Go memory limit set from the container's", "limitBytes", limit, "percent", memlimit.Percent)
	}
	return log
}

// ValidateLoopback accepts "" or "0" (disabled) or host:port whose host is a loopback address
// (127.0.0.0/8, ::1) or "localhost": an endpoint without authentication must not be reachable
// from Pods or other hosts.
func ValidateLoopback(address string) error {
	if address == "" || address == "0" {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%q is not host:port: %w", address, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%q is not a loopback address: the profiler has no authentication, bind it to 127.0.0.1 or [::1]", address)
}
