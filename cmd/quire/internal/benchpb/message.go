package benchpb

import "github.com/quire-dev/quire/message"

// GetUUID returns the message's UUID (the zero UUID if it has none).
func (m *Message) GetUUID() message.UUID {
	var u message.UUID
	copy(u[:], m.Uuid)
	return u
}

// SetUUID sets the message's UUID.
func (m *Message) SetUUID(u message.UUID) { m.Uuid = append(m.Uuid[:0], u[:]...) }

// NewAcknowledgement returns an empty message, to carry an acknowledgement.
func (m *Message) NewAcknowledgement(string) message.Message { return &Message{} }
