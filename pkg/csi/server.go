package csi

import (
	"context"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// logRequests logs every call with secrets stripped, and makes sure no error
// leaves as a bare Unknown: anything that is not already a gRPC status
// becomes Internal with its message.
func (d *Driver) logRequests(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	d.log.Debug("call", "method", info.FullMethod, "request", protosanitizer.StripSecrets(req).String())
	resp, err := handler(ctx, req)
	if err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codes.Internal, err.Error())
		}
		d.log.Warn("call failed", "method", info.FullMethod, "request", protosanitizer.StripSecrets(req).String(),
			"code", status.Code(err).String(), "err", status.Convert(err).Message(), "took", time.Since(start))
		return resp, err
	}
	d.log.Info("call", "method", info.FullMethod, "took", time.Since(start))
	return resp, nil
}
