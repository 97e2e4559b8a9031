package cni

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	. "github.com/onsi/gomega"
)

// frame builds a raw frame whose header announces n bytes followed by body.
func frame(n uint32, body []byte) []byte {
	b := make([]byte, frameHeaderSize, frameHeaderSize+len(body))
	binary.BigEndian.PutUint32(b, n)
	return append(b, body...)
}

// framed builds a well-formed frame around body.
func framed(body []byte) []byte {
	return frame(uint32(len(body)), body)
}

func TestRequestRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		req  Request
	}{
		{
			name: "ADD with every field",
			req: Request{
				Command:     CommandAdd,
				ContainerID: "0123456789abcdef",
				Netns:       "/var/run/netns/cni-1234",
				IfName:      "eth0",
				Args:        "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0",
				Path:        "/opt/cni/bin:/usr/lib/cni",
				StdinData:   []byte(`{"cniVersion":"1.1.0","name":"winnet","type":"winnet-cni"}`),
			},
		},
		{
			name: "DEL without netns",
			req: Request{
				Command:     CommandDel,
				ContainerID: "abc",
				IfName:      "eth0",
				StdinData:   []byte(`{"cniVersion":"1.0.0","name":"winnet","type":"winnet-cni"}`),
			},
		},
		{
			name: "GC keeps stdin byte for byte, including whitespace and non-ASCII",
			req: Request{
				Command:   CommandGC,
				StdinData: []byte("{\n  \"cniVersion\": \"1.1.0\",\n  \"name\": \"w\u00e9\",\n  \"cni.dev/valid-attachments\": [{\"containerID\":\"a\",\"ifname\":\"eth0\"}]\n}\n"),
			},
		},
		{
			name: "VERSION needs no configuration",
			req:  Request{Command: CommandVersion},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var buf bytes.Buffer
			g.Expect(WriteRequest(&buf, tt.req)).To(Succeed())
			g.Expect(binary.BigEndian.Uint32(buf.Bytes())).To(BeEquivalentTo(buf.Len() - frameHeaderSize))

			got, err := ReadRequest(&buf)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Command).To(Equal(tt.req.Command))
			g.Expect(got.ContainerID).To(Equal(tt.req.ContainerID))
			g.Expect(got.Netns).To(Equal(tt.req.Netns))
			g.Expect(got.IfName).To(Equal(tt.req.IfName))
			g.Expect(got.Args).To(Equal(tt.req.Args))
			g.Expect(got.Path).To(Equal(tt.req.Path))
			g.Expect(string(got.StdinData)).To(Equal(string(tt.req.StdinData)))
			g.Expect(buf.Len()).To(BeZero(), "exactly one frame is consumed")
		})
	}
}

func TestResponseRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		resp Response
	}{
		{
			name: "ADD result",
			resp: Response{Result: json.RawMessage(`{"cniVersion":"1.1.0","ips":[{"address":"10.244.1.5/24"}]}`)},
		},
		{
			name: "CNI error with details",
			resp: ErrorResponse(types.ErrTryAgainLater, "HNS network not ready", "network winnet: pending"),
		},
		{
			name: "CNI error without details",
			resp: ErrorResponse(107, "plugin-specific failure", ""),
		},
		{
			name: "empty success",
			resp: Response{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			var buf bytes.Buffer
			g.Expect(WriteResponse(&buf, tt.resp)).To(Succeed())
			got, err := ReadResponse(&buf)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Error).To(Equal(tt.resp.Error))
			if tt.resp.Result == nil {
				g.Expect(got.Result).To(BeEmpty())
			} else {
				g.Expect(got.Result).To(MatchJSON(tt.resp.Result))
			}
		})
	}
}

func TestReadRequestRejects(t *testing.T) {
	validBody := []byte(`{"command":"DEL","stdinData":"e30="}`)
	tests := []struct {
		name      string
		input     []byte
		wantIs    []error
		wantNotIs []error
		wantMsg   string
	}{
		{
			name: "oversized header is rejected before the body is read",
			// Only the header is present: reading the body would fail with io.ErrUnexpectedEOF.
			input:   frame(MaxMessageSize+1, nil),
			wantIs:  []error{ErrMessageTooLarge, ErrProtocol},
			wantMsg: "message larger than 8388608 bytes",
		},
		{
			name:    "maximum uint32 length",
			input:   frame(^uint32(0), nil),
			wantIs:  []error{ErrMessageTooLarge, ErrProtocol},
			wantMsg: "4294967295 bytes",
		},
		{
			name:    "zero length",
			input:   frame(0, nil),
			wantIs:  []error{ErrProtocol},
			wantMsg: "empty message",
		},
		{
			name:    "malformed JSON",
			input:   framed([]byte(`{"command`)),
			wantIs:  []error{ErrProtocol},
			wantMsg: "decoding message: unexpected end of JSON input",
		},
		{
			name:    "not JSON at all",
			input:   framed([]byte(`hello`)),
			wantIs:  []error{ErrProtocol},
			wantMsg: "decoding message: invalid character 'h'",
		},
		{
			name:    "trailing data after the object",
			input:   frame(uint32(len(validBody)+2), append(append([]byte{}, validBody...), '{', '}')),
			wantIs:  []error{ErrProtocol},
			wantMsg: "invalid character '{' after top-level value",
		},
		{
			name:    "wrong field type",
			input:   framed([]byte(`{"command":42}`)),
			wantIs:  []error{ErrProtocol},
			wantMsg: "cannot unmarshal number",
		},
		{
			name:    "unknown command",
			input:   framed([]byte(`{"command":"PING","stdinData":"e30="}`)),
			wantIs:  []error{ErrProtocol},
			wantMsg: `unknown command "PING"`,
		},
		{
			name:    "missing configuration",
			input:   framed([]byte(`{"command":"ADD"}`)),
			wantIs:  []error{ErrProtocol},
			wantMsg: "ADD request without network configuration",
		},
		{
			name:      "truncated body is a transport error, not a protocol error",
			input:     frame(uint32(len(validBody)), validBody[:10]),
			wantIs:    []error{io.ErrUnexpectedEOF},
			wantNotIs: []error{ErrProtocol},
			wantMsg:   "reading message body",
		},
		{
			name:      "truncated header",
			input:     []byte{0, 0},
			wantIs:    []error{io.ErrUnexpectedEOF},
			wantNotIs: []error{ErrProtocol},
			wantMsg:   "reading message header",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := ReadRequest(bytes.NewReader(tt.input))
			g.Expect(err).To(HaveOccurred())
			for _, target := range tt.wantIs {
				g.Expect(errors.Is(err, target)).To(BeTrue(), "error %q should wrap %q", err, target)
			}
			for _, target := range tt.wantNotIs {
				g.Expect(errors.Is(err, target)).To(BeFalse(), "error %q should not wrap %q", err, target)
			}
			g.Expect(err.Error()).To(ContainSubstring(tt.wantMsg))
		})
	}
}

// TestMessageSizeLimit checks the exact boundary: a body of MaxMessageSize bytes passes, one more
// byte does not, on both the writing and the reading side.
func TestMessageSizeLimit(t *testing.T) {
	// paddedRequest returns a DEL request whose JSON encoding is exactly size bytes.
	paddedRequest := func(g *WithT, size int) Request {
		req := Request{Command: CommandDel, StdinData: []byte(`{}`)}
		base, err := json.Marshal(req)
		g.Expect(err).NotTo(HaveOccurred())
		// Adding Args adds `,"args":""` (10 bytes) plus the string.
		req.Args = strings.Repeat("a", size-len(base)-10)
		body, err := json.Marshal(req)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(body).To(HaveLen(size))
		return req
	}

	tests := []struct {
		name    string
		size    int
		wantErr error
	}{
		{name: "exactly the limit", size: MaxMessageSize},
		{name: "one byte over the limit", size: MaxMessageSize + 1, wantErr: ErrMessageTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			req := paddedRequest(g, tt.size)

			var buf bytes.Buffer
			err := WriteRequest(&buf, req)
			if tt.wantErr != nil {
				g.Expect(err).To(MatchError(tt.wantErr))
				g.Expect(buf.Len()).To(BeZero(), "nothing is written for an oversized message")

				// A peer that ignores the limit is rejected by the reader.
				body, mErr := json.Marshal(req)
				g.Expect(mErr).NotTo(HaveOccurred())
				_, err = ReadRequest(bytes.NewReader(frame(uint32(len(body)), body)))
				g.Expect(err).To(MatchError(tt.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			got, err := ReadRequest(&buf)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Args).To(Equal(req.Args))
		})
	}
}

// TestUnknownFieldsAreIgnored: a request or a response with fields this release does not know, as a
// later release may send them, is read as if they were absent (the protocol's Releases rules).
func TestUnknownFieldsAreIgnored(t *testing.T) {
	g := NewWithT(t)
	req, err := ReadRequest(bytes.NewReader(framed([]byte(`{"command":"DEL","containerID":"abc","ifName":"eth0",` +
		`"stdinData":"e30=","protocolVersion":2,"future":{"nested":[1,2,3]}}`))))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req).To(Equal(Request{Command: CommandDel, ContainerID: "abc", IfName: "eth0", StdinData: []byte("{}")}))

	resp, err := ReadResponse(bytes.NewReader(framed([]byte(`{"result":{"cniVersion":"1.0.0"},"warnings":["w"],` +
		`"error":{"code":11,"msg":"later","details":"d","retryAfter":5}}`))))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.Error).To(Equal(&types.Error{Code: 11, Msg: "later", Details: "d"}))
	g.Expect(resp.Result).To(MatchJSON(`{"cniVersion":"1.0.0"}`))
}

func TestReadResponseRejectsMalformed(t *testing.T) {
	tests := []struct {
		name    string
		input   []byte
		wantErr error
		wantMsg string
	}{
		{name: "oversized", input: frame(2*MaxMessageSize, nil), wantErr: ErrMessageTooLarge, wantMsg: "16777216 bytes"},
		{name: "malformed JSON", input: framed([]byte(`{"err`)), wantErr: ErrProtocol, wantMsg: "decoding message"},
		{name: "error of the wrong shape", input: framed([]byte(`{"error":"boom!"}`)), wantErr: ErrProtocol, wantMsg: "cannot unmarshal string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := ReadResponse(bytes.NewReader(tt.input))
			g.Expect(err).To(MatchError(tt.wantErr))
			g.Expect(err.Error()).To(ContainSubstring(tt.wantMsg))
		})
	}
}

func TestWriteRequestValidates(t *testing.T) {
	g := NewWithT(t)
	var buf bytes.Buffer
	err := WriteRequest(&buf, Request{Command: "add", StdinData: []byte(`{}`)})
	g.Expect(err).To(MatchError(ErrProtocol))
	g.Expect(err.Error()).To(ContainSubstring(`unknown command "add"`))
	g.Expect(buf.Len()).To(BeZero())
}

// TestReadFrameAllocatesWhatArrives: a frame that declares MaxMessageSize (8 MiB) and sends 10 bytes
// makes the reader allocate about what arrived, not what was declared (under 64 KiB per frame).
func TestReadFrameAllocatesWhatArrives(t *testing.T) {
	g := NewWithT(t)
	frame := make([]byte, frameHeaderSize+10)
	binary.BigEndian.PutUint32(frame, MaxMessageSize)
	copy(frame[frameHeaderSize:], `{"command"`)
	const runs = 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		_, err := ReadRequest(bytes.NewReader(frame))
		g.Expect(err).To(MatchError(io.ErrUnexpectedEOF))
	}
	runtime.ReadMemStats(&after)
	perFrame := (after.TotalAlloc - before.TotalAlloc) / runs
	t.Logf("a frame declaring %d bytes and sending 10 allocated %d bytes", MaxMessageSize, perFrame)
	g.Expect(perFrame).To(BeNumerically("<", 64<<10))
}
