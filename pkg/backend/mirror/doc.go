// Package mirror is the backend of one dataset stored identically in
// several places (mirror:URL1,URL2[,...]). It orders the replicas by health
// and measured latency (order.go, health.go), hedges a slow read to the
// next replica (hedge.go), fails over on I/O errors, and never reads a file
// again from a replica that disagreed on its size or checksum.
//
// It knows only pkg/backend's contract: each replica is opened by the
// OpenFunc its caller passes (package all), so it imports no other backend.
package mirror
