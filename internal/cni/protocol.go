package cni

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/containernetworking/cni/pkg/types"
)

// The shim<->agent protocol.
//
// The shim (winnet-cni, run by kubelet/containerd for every CNI command) opens one connection to the
// agent per command: a unix socket on Linux (DefaultAddress, /var/run/winnet/cni.sock) or a named pipe
// on Windows (\\.\pipe\winnet-cni). On that connection the shim writes exactly one Request frame, the
// agent answers with exactly one Response frame, and both sides close the connection.
//
// A frame is a 4-byte big-endian unsigned length followed by that many bytes of JSON (one object,
// nothing after it). A frame whose length is zero or larger than MaxMessageSize is rejected before its
// body is read; a body that is not exactly one JSON object whose known fields have the expected types
// is rejected as well (fields the receiver does not know are ignored, see Releases below). Both errors
// wrap ErrProtocol.
//
// The shim answers VERSION itself; the agent sees ADD, DEL, CHECK, STATUS and GC. StdinData carries the
// network configuration exactly as the container runtime passed it on the shim's stdin (including the
// runtime-injected prevResult, runtimeConfig and, for GC, cni.dev/valid-attachments).
//
// Releases. The shim and the agent are replaced at different moments (the agent's DaemonSet rolls
// node by node and install-cni copies the shim on its own), so a shim of release N meets an agent of
// N-1 and the reverse, on the same node. The protocol carries no version; it stays compatible both
// ways by these rules, which also hold for what else the agent writes and the shim reads (the
// conflist's fields, ShimNetConf, and the retirement record, Retirement):
//   - A receiver ignores JSON fields it does not know (encoding/json's default: never
//     DisallowUnknownFields, never a strict decoder).
//   - A new field is optional: absent (its zero value) means what the previous release does, and no
//     sender relies on its peer having understood it, since a previous release drops it silently.
//     Behaviour that needs the peer's agreement needs a version field first, which a previous
//     receiver ignores (so its absence in an answer says "previous release").
//   - No field is removed, renamed, or changes type or meaning while the previous release reads or
//     writes it; the framing, MaxMessageSize, MaxConfigSize, the commands and the default address stay.
//   - The agent's ADD result keeps a cniVersion the previous shim's CNI library decodes and converts
//     (types100.ImplementedSpecVersion today).
// test/upgrade/cniskew holds this against the previous release (hack/previous-release): its shim with
// this agent and this shim with its agent, ADD, CHECK and DEL of a Pod and a malformed call.

// MaxConfigSize is the largest network configuration, in bytes, winnet accepts on the shim's stdin.
// Neither the CNI spec nor containerd bounds it; a larger one is refused by the shim (and the agent)
// with ErrInvalidNetworkConfig naming this limit, never forwarded to fail on the way.
const MaxConfigSize = 4 << 20 // 4 MiB

// MaxMessageSize is the largest frame body, in bytes, that either side sends or accepts. A request
// carries the configuration in base64 (4/3 of MaxConfigSize) and the CNI_* variables, which the
// operating system bounds (128 KiB per variable on Linux, a 32 Ki-character environment on Windows).
const MaxMessageSize = 8 << 20 // 8 MiB

// frameHeaderSize is the size of the big-endian length prefix of every frame.
const frameHeaderSize = 4

var (
	// ErrProtocol is wrapped by every error caused by a frame that violates the protocol (as opposed
	// to a transport failure such as a refused connection or a timeout).
	ErrProtocol = errors.New("winnet CNI protocol error")
	// ErrMessageTooLarge is returned for a frame larger than MaxMessageSize; it wraps ErrProtocol.
	ErrMessageTooLarge = fmt.Errorf("%w: message larger than %d bytes", ErrProtocol, MaxMessageSize)
)

// Command is a CNI command, as in the CNI_COMMAND environment variable.
type Command string

// The CNI commands of spec 1.1.0.
const (
	CommandAdd     Command = "ADD"
	CommandDel     Command = "DEL"
	CommandCheck   Command = "CHECK"
	CommandStatus  Command = "STATUS"
	CommandGC      Command = "GC"
	CommandVersion Command = "VERSION"
)

// Valid reports whether c is one of the CNI commands of spec 1.1.0.
func (c Command) Valid() bool {
	switch c {
	case CommandAdd, CommandDel, CommandCheck, CommandStatus, CommandGC, CommandVersion:
		return true
	}
	return false
}

// Request is one CNI invocation forwarded by the shim: the CNI_* environment variables and the raw
// network configuration read from stdin.
type Request struct {
	// Command is CNI_COMMAND.
	Command Command `json:"command"`
	// ContainerID is CNI_CONTAINERID (empty for STATUS and GC).
	ContainerID string `json:"containerID,omitempty"`
	// Netns is CNI_NETNS: a network namespace path on Linux, a namespace GUID or "none" on Windows.
	Netns string `json:"netns,omitempty"`
	// IfName is CNI_IFNAME.
	IfName string `json:"ifName,omitempty"`
	// Args is CNI_ARGS, unparsed ("K1=V1;K2=V2").
	Args string `json:"args,omitempty"`
	// Path is CNI_PATH.
	Path string `json:"path,omitempty"`
	// StdinData is the network configuration exactly as received on stdin (base64 on the wire, as
	// encoding/json encodes byte slices, so that it arrives byte for byte).
	StdinData []byte `json:"stdinData"`
}

// ConfigTooLarge returns the CNI error for a network configuration of n bytes, larger than MaxConfigSize.
func ConfigTooLarge(n int) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig,
		fmt.Sprintf("the network configuration is %d bytes, more than winnet's limit of %d bytes (%d MiB)", n, MaxConfigSize, MaxConfigSize>>20), "")
}

// Validate checks the fields every request must carry.
func (r *Request) Validate() error {
	if !r.Command.Valid() {
		return fmt.Errorf("%w: unknown command %q", ErrProtocol, r.Command)
	}
	if len(r.StdinData) == 0 && r.Command != CommandVersion {
		return fmt.Errorf("%w: %s request without network configuration", ErrProtocol, r.Command)
	}
	return nil
}

// Response is the agent's answer to a Request. Exactly one of the following holds:
//   - Error is set: the command failed; the shim prints Error as the CNI error (code, msg, details).
//   - Error is nil and the command was ADD: Result holds the CNI result JSON.
//   - Error is nil otherwise: the command succeeded and Result is empty.
type Response struct {
	// Result is the CNI result JSON of a successful ADD.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is the CNI error of a failed command.
	Error *types.Error `json:"error,omitempty"`
}

// ErrorResponse returns a Response carrying the CNI error code, msg and details.
func ErrorResponse(code uint, msg, details string) Response {
	return Response{Error: types.NewError(code, msg, details)}
}

// writeFrame encodes v as JSON and writes it as one frame.
func writeFrame(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("%w: encoding message: %w", ErrProtocol, err)
	}
	if len(body) > MaxMessageSize {
		return fmt.Errorf("encoding message of %d bytes: %w", len(body), ErrMessageTooLarge)
	}
	frame := make([]byte, frameHeaderSize+len(body))
	binary.BigEndian.PutUint32(frame, uint32(len(body)))
	copy(frame[frameHeaderSize:], body)
	if _, err := w.Write(frame); err != nil {
		return fmt.Errorf("writing message: %w", err)
	}
	return nil
}

// readFrame reads one frame and decodes its JSON body into v.
func readFrame(r io.Reader, v any) error {
	var header [frameHeaderSize]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		return fmt.Errorf("reading message header: %w", err)
	}
	n := binary.BigEndian.Uint32(header[:])
	if n == 0 {
		return fmt.Errorf("%w: empty message", ErrProtocol)
	}
	if n > MaxMessageSize {
		return fmt.Errorf("reading message of %d bytes: %w", n, ErrMessageTooLarge)
	}
	// The buffer grows as bytes arrive (bytes.Buffer.ReadFrom, from 512 bytes by doubling): a peer
	// that declares a large frame and sends little makes the reader allocate what it sent, not
	// what it declared.
	var body bytes.Buffer
	if got, err := io.CopyN(&body, r, int64(n)); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("reading message body of %d bytes (got %d): %w", n, got, err)
	}
	if err := json.Unmarshal(body.Bytes(), v); err != nil {
		return fmt.Errorf("%w: decoding message: %w", ErrProtocol, err)
	}
	return nil
}

// WriteRequest writes req as one frame.
func WriteRequest(w io.Writer, req Request) error {
	if err := req.Validate(); err != nil {
		return err
	}
	return writeFrame(w, req)
}

// ReadRequest reads one Request frame and validates it.
func ReadRequest(r io.Reader) (Request, error) {
	var req Request
	if err := readFrame(r, &req); err != nil {
		return Request{}, err
	}
	if err := req.Validate(); err != nil {
		return Request{}, err
	}
	return req, nil
}

// WriteResponse writes resp as one frame.
func WriteResponse(w io.Writer, resp Response) error {
	return writeFrame(w, resp)
}

// ReadResponse reads one Response frame.
func ReadResponse(r io.Reader) (Response, error) {
	var resp Response
	if err := readFrame(r, &resp); err != nil {
		return Response{}, err
	}
	return resp, nil
}
