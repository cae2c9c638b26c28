package csi

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// logRequests logs every call with secrets stripped, and makes sure no error
// leaves as a bare Unknown: anything that is not already a gRPC status
// becomes Internal with its message. Every error message leaves through
// eventSafe.
func (d *Driver) logRequests(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	d.log.Debug("call", "method", info.FullMethod, "request", protosanitizer.StripSecrets(req).String())
	resp, err := handler(ctx, req)
	if err != nil {
		st, ok := status.FromError(err)
		if !ok {
			st = status.New(codes.Internal, err.Error())
		}
		err = status.Error(st.Code(), eventSafe(st.Message()))
		d.log.Warn("call failed", "method", info.FullMethod, "request", protosanitizer.StripSecrets(req).String(),
			"code", status.Code(err).String(), "err", status.Convert(err).Message(), "took", time.Since(start))
		return resp, err
	}
	d.log.Info("call", "method", info.FullMethod, "took", time.Since(start))
	return resp, nil
}

// eventSafe rewrites an error message so that it reads the same in a pod's
// events. The kubelet passes a CSI error through fmt twice before it
// becomes an event (GenerateError's fmt.Errorf of the message, then
// recorder.Eventf with it as the format), so every '%' in it turns into
// "%!…(MISSING)" garbage: "endpoint=http%3A%2F%2F…" in a source URL, "80%"
// in a budget. So percent-escapes are decoded where they decode to
// printable text (URLs read better that way anyway), and any '%' left is
// the fullwidth percent sign, which fmt does not interpret.
func eventSafe(msg string) string {
	if !strings.Contains(msg, "%") {
		return msg
	}
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		if msg[i] == '%' && i+2 < len(msg) {
			if dec, err := url.PathUnescape(msg[i : i+3]); err == nil && len(dec) == 1 && dec[0] >= 0x20 && dec[0] < 0x7f && dec[0] != '%' {
				b.WriteString(dec)
				i += 2
				continue
			}
		}
		if msg[i] == '%' {
			b.WriteString("\uff05")
			continue
		}
		b.WriteByte(msg[i])
	}
	return b.String()
}
