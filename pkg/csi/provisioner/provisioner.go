// Package provisioner is csi-driver --mode provisioner: dynamic provisioning
// without the upstream external-provisioner sidecar. It watches the
// PersistentVolumeClaims of StorageClasses whose provisioner is
// cachefs.epochfs.io and creates their PersistentVolumes through
// sig-storage-lib-external-provisioner (queues, retries, PVC events, leader
// election), calling the driver's own CreateVolume and DeleteVolume in
// process (pkg/csi validates the parameters there) instead of over a CSI
// socket.
//
// It speaks the StorageClass conventions of external-provisioner (the
// csi.storage.k8s.io/*-secret-name parameters and their templates, the
// --extra-create-metadata keys); it knows nothing of mounts or datasets.
package provisioner

import (
	"context"
	"errors"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"

	"github.com/epochfs/epochfs/pkg/volattr"
)

// Controller is the part of the CSI Controller service the provisioner
// calls: pkg/csi's Driver in controller mode.
type Controller interface {
	CreateVolume(context.Context, *csipb.CreateVolumeRequest) (*csipb.CreateVolumeResponse, error)
	DeleteVolume(context.Context, *csipb.DeleteVolumeRequest) (*csipb.DeleteVolumeResponse, error)
}

// Provisioner turns claims into PersistentVolumes. Its fields are
// immutable; the library calls it from several workers at once.
type Provisioner struct {
	ctrl   Controller
	client kubernetes.Interface // reads the provisioner secrets
}

var _ controller.Provisioner = (*Provisioner)(nil)

// New returns a Provisioner calling ctrl and reading provisioner secrets
// with client.
func New(ctrl Controller, client kubernetes.Interface) *Provisioner {
	return &Provisioner{ctrl: ctrl, client: client}
}

// Provision creates the volume of opts.PVC with CreateVolume and returns its
// PV. Every error is final for this attempt (CreateVolume works in process
// and leaves nothing in the background); the library reports it as a
// ProvisioningFailed event on the claim and retries with back-off
// (InvalidArgument: slowly).
func (p *Provisioner) Provision(ctx context.Context, opts controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	pv, err := p.provision(ctx, opts)
	return pv, controller.ProvisioningFinished, err
}

func (p *Provisioner) provision(ctx context.Context, opts controller.ProvisionOptions) (*corev1.PersistentVolume, error) {
	claim, class := opts.PVC, opts.StorageClass
	if claim == nil || class == nil || opts.PVName == "" {
		return nil, errors.New("provisioner: no claim, StorageClass or PV name")
	}
	if err := checkClaim(claim); err != nil {
		return nil, err
	}
	params, err := splitParameters(class.Parameters)
	if err != nil {
		return nil, err
	}
	names := templateNames{pvName: opts.PVName, pvcName: claim.Name, pvcNamespace: claim.Namespace}
	provRef, err := params.provisioner.resolve(names)
	if err != nil {
		return nil, err
	}
	stageRef, err := params.nodeStage.resolve(names)
	if err != nil {
		return nil, err
	}
	publishRef, err := params.nodePublish.resolve(names)
	if err != nil {
		return nil, err
	}
	secrets, err := p.readSecret(ctx, provRef)
	if err != nil {
		return nil, err
	}
	driverParams := params.driver
	driverParams[volattr.ClaimName] = claim.Name
	driverParams[volattr.ClaimNamespace] = claim.Namespace
	driverParams[volattr.PVName] = opts.PVName

	request := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	limit := claim.Spec.Resources.Limits[corev1.ResourceStorage]
	resp, err := p.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name:               opts.PVName,
		CapacityRange:      &csipb.CapacityRange{RequiredBytes: request.Value(), LimitBytes: limit.Value()},
		VolumeCapabilities: capabilities(claim.Spec.AccessModes, class.MountOptions),
		Parameters:         driverParams,
		Secrets:            secrets,
	})
	if err != nil {
		return nil, err // a gRPC status: the library tells InvalidArgument apart
	}
	vol := resp.GetVolume()
	capacity := vol.GetCapacityBytes()
	if capacity <= 0 {
		capacity = request.Value()
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if class.ReclaimPolicy != nil {
		reclaim = *class.ReclaimPolicy
	}
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: opts.PVName},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes:                   claim.Spec.AccessModes,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(capacity, resource.BinarySI)},
			PersistentVolumeReclaimPolicy: reclaim,
			MountOptions:                  class.MountOptions,
			VolumeMode:                    claim.Spec.VolumeMode,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver:       volattr.DriverName,
				VolumeHandle: vol.GetVolumeId(),
				// A dataset volume is a read-only view whatever the claim's
				// access mode: the kubelet then publishes it readonly.
				ReadOnly:             true,
				VolumeAttributes:     vol.GetVolumeContext(),
				NodeStageSecretRef:   stageRef,
				NodePublishSecretRef: publishRef,
			}},
		},
	}, nil
}

// checkClaim refuses what a dataset volume cannot give a claim: a selector
// over existing PVs, a data source (snapshot, clone, populator), a block
// device, no access mode.
func checkClaim(claim *corev1.PersistentVolumeClaim) error {
	switch {
	case claim.Spec.Selector != nil:
		return errors.New("provisioner: claim selectors are not supported (a provisioned volume has no labels to match)")
	case claim.Spec.DataSource != nil || claim.Spec.DataSourceRef != nil:
		return errors.New("provisioner: data sources (snapshots, clones, populators) are not supported: a dataset volume is a view of its StorageClass's source")
	case claim.Spec.VolumeMode != nil && *claim.Spec.VolumeMode == corev1.PersistentVolumeBlock:
		return errors.New("provisioner: volumeMode Block is not supported: a dataset volume is a file tree")
	case len(claim.Spec.AccessModes) == 0:
		return errors.New("provisioner: the claim has no access mode")
	}
	return nil
}

// accessModes maps a claim's access modes to CSI's as external-provisioner
// does; CreateVolume refuses the writer modes it does not serve.
var accessModes = map[corev1.PersistentVolumeAccessMode]csipb.VolumeCapability_AccessMode_Mode{
	corev1.ReadWriteOnce:    csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
	corev1.ReadOnlyMany:     csipb.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY,
	corev1.ReadWriteMany:    csipb.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER,
	corev1.ReadWriteOncePod: csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
}

// capabilities is one mount capability per access mode (an unknown mode:
// UNKNOWN, which CreateVolume refuses).
func capabilities(modes []corev1.PersistentVolumeAccessMode, mountOptions []string) []*csipb.VolumeCapability {
	out := make([]*csipb.VolumeCapability, 0, len(modes))
	for _, m := range modes {
		out = append(out, &csipb.VolumeCapability{
			AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{MountFlags: mountOptions}},
			AccessMode: &csipb.VolumeCapability_AccessMode{Mode: accessModes[m]},
		})
	}
	return out
}

// Delete forgets the volume with DeleteVolume, which never touches the
// dataset; the library then deletes the PV. Volumes of other drivers are
// ignored. DeleteVolume gets no secrets: it reads nothing.
func (p *Provisioner) Delete(ctx context.Context, pv *corev1.PersistentVolume) error {
	src := pv.Spec.CSI
	if src == nil || src.Driver != volattr.DriverName {
		return &controller.IgnoredError{Reason: "not a " + volattr.DriverName + " volume"}
	}
	if _, err := p.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: src.VolumeHandle}); err != nil {
		return fmt.Errorf("provisioner: delete volume %s: %w", src.VolumeHandle, err)
	}
	return nil
}
