package rabbitmq

// CloseConnection closes the publisher's current connection, as a network
// failure or a broker restart would, so tests can check the lazy reconnect.
func (p *Publisher) CloseConnection() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.conn.Close()
}
