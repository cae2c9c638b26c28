package controller

// The admin's source policy applied to a job's datasets before its first
// attempt.

import (
	"fmt"

	"github.com/epochfs/epochfs/pkg/source"
	"github.com/epochfs/epochfs/pkg/sourcepolicy"
	"github.com/epochfs/epochfs/pkg/volattr"
)

// ReasonSourceNotAllowed is the reason of a job refused by the source
// policy (condition Valid False, phase Failed).
const ReasonSourceNotAllowed = "SourceNotAllowed"

// checkSources applies the source policy to every source dataset: to
// every attribute of its volume that names something to read (the source,
// and a manifest should the volume carry one), as the CSI node will
// (sourcepolicy.CheckVolumeLexically). The controller sees no credentials
// (they are the node's or the volume's secrets), so network places are
// checked as if they had some: only the network rules apply here; the node
// enforces the credential rule. A TrainingJob's author is a tenant: an nfs
// source may not read as uid/gid 0 unless a rule pins it (the node cannot
// tell the controller's volumes from the admin's, so this check is the one
// that counts for them).
func (r *Reconciler) checkSources(p *plan) error {
	for _, d := range p.datasets {
		if d.id == "" {
			continue
		}
		src, err := source.Parse(d.spec.Source)
		if err != nil { // newPlan has parsed it
			return fmt.Errorf("dataset %q: %w", d.spec.Name, err)
		}
		err = r.sources.CheckVolumeLexically(sourcepolicy.Volume{
			Source:      src,
			Manifest:    d.attrs[volattr.Manifest],
			Credentials: func(source.Source) bool { return true },
			Tenant:      true,
		})
		if err != nil {
			return fmt.Errorf("dataset %q: %w", d.spec.Name, err)
		}
	}
	return nil
}
