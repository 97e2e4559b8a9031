package servedcrd

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-logr/logr"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// Options configure a Kind.
type Options struct {
	// Config reaches the API server.
	Config *rest.Config
	// Scheme holds the kind's Go type.
	Scheme *runtime.Scheme
	// GroupVersionKind is the kind and the one version of it that is read.
	GroupVersionKind schema.GroupVersionKind
	// Object is an empty object of the kind (its Go type), List its list.
	Object client.Object
	// Plural is the kind's resource name: the CRD followed is <Plural>.<group>.
	Plural string
	// Transform, when set, trims the cached objects (cache.TransformStripManagedFields).
	Transform toolscache.TransformFunc
	// Log is the logger (the zero value: the one of Start's context).
	Log logr.Logger
}

// Kind is a manager Runnable that watches one CustomResourceDefinition by name (the kind's plural
// and group, the one object the RBAC rule names) and, while it serves the version, caches the kind's
// objects with a cache of its own, which it stops when the CRD is deleted (or terminating, or no
// longer serves the version). It maps the kind to its resource from the CRD itself, not from
// discovery, which may lag the CRD's Established condition.
type Kind struct {
	opts    Options
	crdName string

	// wake is signalled when the CRD changed; latest is its last state (nil: absent).
	wake   chan struct{}
	mu     sync.Mutex
	latest *apiextensionsv1.CustomResourceDefinition
	// serving is the cache of the version being served (nil: not served); ready once it synced.
	serving *serving
	// watches are the controllers' sources started so far.
	watches []*watchSink
	// decided: the CRD was listed, and the kind's cache synced if it served the kind then.
	decided bool
	// notServed is why the kind was last found not served (logged once per reason).
	notServed string
	// watchErr is the CRD watch's last error, cleared when the CRD is listed.
	watchErr error
}

type serving struct {
	mapping meta.RESTMapping
	cache   cache.Cache
	ctx     context.Context
	cancel  context.CancelFunc
	ready   bool
}

type watchSink struct {
	ctx context.Context
	q   workqueue.TypedRateLimitingInterface[reconcile.Request]
	w   Watch
}

// Watch is what a controller is told of the kind.
type Watch struct {
	// Handler gets the kind's object events while it is served (the cached objects as creations
	// when it starts to be).
	Handler handler.EventHandler
	// Predicates filter them.
	Predicates []predicate.Predicate
	// Served, when set, is called with the controller's queue when the kind starts to be served
	// (its cache synced, Reader set) and when it stops being served (Reader nil).
	Served func(q workqueue.TypedRateLimitingInterface[reconcile.Request], served bool)
}

// New returns a Kind for the options.
func New(opts Options) (*Kind, error) {
	if opts.Config == nil || opts.Scheme == nil || opts.Object == nil || opts.Plural == "" || opts.GroupVersionKind.Kind == "" {
		return nil, errors.New("servedcrd: config, scheme, object, kind and plural are required")
	}
	return &Kind{opts: opts, crdName: opts.Plural + "." + opts.GroupVersionKind.Group, wake: make(chan struct{}, 1)}, nil
}

// CRDName is the name of the CustomResourceDefinition followed.
func (k *Kind) CRDName() string { return k.crdName }

// Reader reads the kind's objects from the cache while the kind is served; nil otherwise. A Reader
// got before the CRD went may answer with an error: read it again.
func (k *Kind) Reader() client.Reader {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.serving == nil || !k.serving.ready {
		return nil
	}
	return k.serving.cache
}

// Decided tells whether the Kind knows if the kind is served since it started: the CRD was listed,
// and the kind's cache synced if the CRD served it then. Before, Reader's nil says nothing: a
// controller that would remove the kind's effects when it reads none waits for Decided.
func (k *Kind) Decided() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.decided
}

// WatchError is the last error of the CRD's list or watch since it was last listed (nil: none), so
// that a controller waiting for Decided can say why (typically an RBAC rule that lacks the CRD).
func (k *Kind) WatchError() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.watchErr
}

// NeedLeaderElection is false: every instance follows the CRD, as the manager's caches run on
// every instance.
func (k *Kind) NeedLeaderElection() bool { return false }

// Source returns a controller source that delivers the watch's events as long as the controller runs.
func (k *Kind) Source(w Watch) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		s := &watchSink{ctx: ctx, q: q, w: w}
		k.mu.Lock()
		k.watches = append(k.watches, s)
		var err error
		started := false
		if k.serving != nil && k.serving.ready {
			started, err = k.startSink(k.serving, s)
		}
		k.mu.Unlock()
		if started {
			s.served(true)
		}
		return err
	})
}

// served tells the controller the kind started or stopped being served.
func (s *watchSink) served(served bool) {
	if s.w.Served != nil && s.ctx.Err() == nil {
		s.w.Served(s.q, served)
	}
}

// startSink has the sink told of the serving cache's events (k.mu held); started is false for a
// controller that stopped.
func (k *Kind) startSink(sv *serving, s *watchSink) (started bool, err error) {
	if s.ctx.Err() != nil {
		return false, nil
	}
	// The events stop with the first of the controller's context and the serving's.
	ctx, cancel := context.WithCancel(sv.ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	context.AfterFunc(ctx, func() { stop() })
	if err := source.Kind(sv.cache, k.opts.Object, s.w.Handler, s.w.Predicates...).Start(ctx, s.q); err != nil {
		cancel()
		return false, fmt.Errorf("watching %s: %w", k.opts.GroupVersionKind.Kind, err)
	}
	return true, nil
}

// Start follows the CRD until ctx ends.
func (k *Kind) Start(ctx context.Context) error {
	log := k.opts.Log
	if log.GetSink() == nil {
		log = ctrl.LoggerFrom(ctx)
	}
	log = log.WithValues("customResourceDefinition", k.crdName)
	ctx = ctrl.LoggerInto(ctx, log)
	cs, err := apiextensionsclient.NewForConfig(k.opts.Config)
	if err != nil {
		return fmt.Errorf("creating the client of CustomResourceDefinitions: %w", err)
	}
	crds := cs.ApiextensionsV1().CustomResourceDefinitions()
	// One object, by name: a list or watch with the field selector metadata.name is authorised by
	// an RBAC rule that names it (resourceNames), as a get is.
	byName := fields.OneTermEqualSelector("metadata.name", k.crdName).String()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return crds.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return crds.Watch(ctx, o)
		},
	}
	inf := toolscache.NewSharedIndexInformer(lw, &apiextensionsv1.CustomResourceDefinition{}, 0, nil)
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *toolscache.Reflector, err error) {
		log.Error(err, "Watching the CustomResourceDefinition failed; retrying (the RBAC rule for it must allow get, list and watch)")
		k.mu.Lock()
		k.watchErr = err
		k.mu.Unlock()
	}); err != nil {
		return fmt.Errorf("setting the CustomResourceDefinition watch's error handler: %w", err)
	}
	set := func(obj any) {
		crd, _ := obj.(*apiextensionsv1.CustomResourceDefinition)
		k.mu.Lock()
		k.latest, k.watchErr = crd, nil
		k.mu.Unlock()
		select {
		case k.wake <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandlerWithOptions(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(any) { set(nil) },
	}, toolscache.HandlerOptions{}); err != nil {
		return fmt.Errorf("handling the CustomResourceDefinition's events: %w", err)
	}
	go inf.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil
	}
	// The CRD was listed: say once whether it serves the kind (absent: nothing happened).
	set(k.latestCRD())
	for {
		select {
		case <-ctx.Done():
			k.stop(ctx, "stopping")
			return nil
		case <-k.wake:
		}
		k.follow(ctx)
	}
}

func (k *Kind) latestCRD() *apiextensionsv1.CustomResourceDefinition {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.latest
}

// follow starts or stops the cache for the CRD's latest state.
func (k *Kind) follow(ctx context.Context) {
	log := ctrl.LoggerFrom(ctx)
	crd := k.latestCRD()
	mapping, why := k.servedMapping(crd)
	k.mu.Lock()
	cur := k.serving
	k.mu.Unlock()
	if cur != nil && mapping != nil && *mapping == cur.mapping {
		return
	}
	if cur != nil {
		k.stop(ctx, why)
	}
	if mapping == nil {
		k.mu.Lock()
		k.decided = true
		logged := k.notServed == why
		k.notServed = why
		k.mu.Unlock()
		if cur == nil && !logged {
			log.Info("The cluster does not serve the kind: nothing of it is realised until its CRD does, which needs no restart",
				"kind", k.opts.GroupVersionKind.Kind, "version", k.opts.GroupVersionKind.Version, "reason", why)
		}
		return
	}
	if err := k.serve(ctx, *mapping); err != nil {
		log.Error(err, "Caching the kind the CRD serves failed; waiting for its next change", "kind", k.opts.GroupVersionKind.Kind)
	}
}

// servedMapping is the kind's REST mapping when the CRD serves it, or nil and why not.
func (k *Kind) servedMapping(crd *apiextensionsv1.CustomResourceDefinition) (*meta.RESTMapping, string) {
	gvk := k.opts.GroupVersionKind
	switch {
	case crd == nil:
		return nil, "the CustomResourceDefinition is absent"
	case crd.DeletionTimestamp != nil:
		return nil, "the CustomResourceDefinition is being deleted"
	case crd.Spec.Group != gvk.Group || crd.Status.AcceptedNames.Kind != gvk.Kind || crd.Status.AcceptedNames.Plural == "":
		return nil, fmt.Sprintf("the CustomResourceDefinition does not define the kind %s of group %s (accepted kind %q, group %q)",
			gvk.Kind, gvk.Group, crd.Status.AcceptedNames.Kind, crd.Spec.Group)
	}
	established := false
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			established = true
		}
	}
	if !established {
		return nil, "the CustomResourceDefinition is not established yet"
	}
	served := false
	for _, v := range crd.Spec.Versions {
		if v.Name == gvk.Version && v.Served {
			served = true
		}
	}
	if !served {
		return nil, fmt.Sprintf("the CustomResourceDefinition does not serve version %s", gvk.Version)
	}
	scope := meta.RESTScopeRoot
	if crd.Spec.Scope == apiextensionsv1.NamespaceScoped {
		scope = meta.RESTScopeNamespace
	}
	return &meta.RESTMapping{
		Resource:         gvk.GroupVersion().WithResource(crd.Status.AcceptedNames.Plural),
		GroupVersionKind: gvk,
		Scope:            scope,
	}, ""
}

// serve starts a cache of the kind for the mapping; its sinks are started once it synced.
func (k *Kind) serve(ctx context.Context, mapping meta.RESTMapping) error {
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{mapping.GroupVersionKind.GroupVersion()})
	mapper.AddSpecific(mapping.GroupVersionKind, mapping.Resource, mapping.Resource, mapping.Scope)
	c, err := cache.New(k.opts.Config, cache.Options{
		Scheme: k.opts.Scheme, Mapper: mapper, ReaderFailOnMissingInformer: true, DefaultTransform: k.opts.Transform,
	})
	if err != nil {
		return fmt.Errorf("creating the cache of %s: %w", mapping.Resource, err)
	}
	sctx, cancel := context.WithCancel(ctx)
	if _, err := c.GetInformer(sctx, k.opts.Object); err != nil {
		cancel()
		return fmt.Errorf("creating the informer of %s: %w", mapping.Resource, err)
	}
	sv := &serving{mapping: mapping, cache: c, ctx: sctx, cancel: cancel}
	k.mu.Lock()
	k.serving, k.notServed = sv, ""
	k.mu.Unlock()
	log := ctrl.LoggerFrom(ctx).WithValues("kind", mapping.GroupVersionKind.Kind, "resource", mapping.Resource.String())
	log.Info("The cluster serves the kind: caching its objects")
	go func() {
		if err := c.Start(sctx); err != nil {
			log.Error(err, "The cache of the kind stopped")
		}
	}()
	go func() {
		if !c.WaitForCacheSync(sctx) {
			return
		}
		k.mu.Lock()
		if k.serving != sv {
			k.mu.Unlock()
			return
		}
		sv.ready, k.decided = true, true
		log.Info("The kind's objects are cached: realising them")
		var started []*watchSink
		for _, s := range k.watches {
			ok, err := k.startSink(sv, s)
			if err != nil {
				log.Error(err, "A controller's watch of the kind failed to start")
			}
			if ok {
				started = append(started, s)
			}
		}
		k.mu.Unlock()
		for _, s := range started {
			s.served(true)
		}
	}()
	return nil
}

// stop drops the serving cache and tells the controllers.
func (k *Kind) stop(ctx context.Context, why string) {
	k.mu.Lock()
	sv := k.serving
	k.serving, k.notServed = nil, why
	var told []*watchSink
	if sv != nil && sv.ready {
		told = k.watches
	}
	k.mu.Unlock()
	if sv == nil {
		return
	}
	sv.cancel()
	if ctx.Err() == nil {
		ctrl.LoggerFrom(ctx).Info("The cluster no longer serves the kind: its objects are no longer realised, until the CRD serves them again (no restart needed)",
			"kind", sv.mapping.GroupVersionKind.Kind, "version", sv.mapping.GroupVersionKind.Version, "reason", why)
	}
	for _, s := range told {
		s.served(false)
	}
}
