package metricsauth

// The permissions a metrics endpoint of winnet-agent or winnet-controller needs; `make manifests`
// turns them into config/rbac/metrics-auth. Each scrape is authenticated with a TokenReview and
// authorized with a SubjectAccessReview (get on the non-resource URL /metrics), by controller-runtime's
// filters.WithAuthenticationAndAuthorization. The Helm chart adds these rules to a component's
// ClusterRole only when that component's metricsPort is not 0: with metrics off (the default) neither
// ServiceAccount may create reviews.

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
