package message_test

import (
	"google.golang.org/protobuf/types/known/apipb"

	"github.com/quire-dev/quire/message"
)

// framingJSONMessage is a message of the JSON framing's tests, with its
// UUID in a field as the framing's convention has it.
type framingJSONMessage struct {
	UUID  message.UUID `json:"uuid"`
	Kind  string       `json:"kind"`
	User  string       `json:"user"`
	Count int64        `json:"count"`
	Tags  []string     `json:"tags,omitempty"`
}

func (m *framingJSONMessage) GetUUID() message.UUID  { return m.UUID }
func (m *framingJSONMessage) SetUUID(u message.UUID) { m.UUID = u }
func (m *framingJSONMessage) NewAcknowledgement(string) message.Message {
	return new(framingJSONMessage)
}

// framingProtoMessage is a message of the proto framing's tests. Without
// protoc, the tests use a generated type of the protobuf module, Api, in
// place of an application's type: its Name and Methods are the content,
// and its Version holds the UUID, as text (an application's message would
// have a field "bytes uuid = 1" instead).
type framingProtoMessage struct {
	*apipb.Api
}

func newFramingProtoMessage() framingProtoMessage {
	return framingProtoMessage{Api: new(apipb.Api)}
}

func (m framingProtoMessage) GetUUID() message.UUID {
	var u message.UUID
	if u.UnmarshalText([]byte(m.Version)) != nil {
		return message.UUID{}
	}
	return u
}

func (m framingProtoMessage) SetUUID(u message.UUID) { m.Version = u.String() }

func (m framingProtoMessage) NewAcknowledgement(string) message.Message {
	return newFramingProtoMessage()
}
