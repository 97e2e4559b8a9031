// Command ociimage writes a directory as a one-layer OCI image archive (an OCI image layout in a
// tar), named by the io.containerd.image.name annotation so that `ctr images import` registers it
// under that name. hack/setup-kubelet-deps.sh builds the images e2e.test and kubelet run (pause,
// agnhost) with it: nothing is ever pulled.
package main
