// Package api proves winnet's API against a real kube-apiserver: validation, defaults, the status
// subresource and the columns kubectl prints.
package api
