package testpb

import "github.com/quire-dev/quire/message"

// GetUUID returns the event's UUID (the zero UUID if it has none).
func (e *Event) GetUUID() message.UUID {
	var u message.UUID
	copy(u[:], e.Uuid)
	return u
}

// SetUUID sets the event's UUID.
func (e *Event) SetUUID(u message.UUID) { e.Uuid = append(e.Uuid[:0], u[:]...) }

// NewAcknowledgement returns an empty event, to carry an acknowledgement.
func (e *Event) NewAcknowledgement(string) message.Message { return &Event{} }

// GetUUID returns the event's UUID (the zero UUID if it has none).
func (e *PlainEvent) GetUUID() message.UUID {
	var u message.UUID
	copy(u[:], e.Uuid)
	return u
}

// SetUUID sets the event's UUID.
func (e *PlainEvent) SetUUID(u message.UUID) { e.Uuid = append(e.Uuid[:0], u[:]...) }

// NewAcknowledgement returns an empty event, to carry an acknowledgement.
func (e *PlainEvent) NewAcknowledgement(string) message.Message { return &PlainEvent{} }
