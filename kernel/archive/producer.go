package archive

// Producer is an archiving service as the fleet ledger knows it: the event
// type its archives are announced under, the source_service they carry, its
// store key segment (retention-archives/<Service>/<table>/…) and the tables
// it archives. A service derives it from its own registration (its
// Bookkeeper and its TableSpecs), so a table added to a producer is in the
// vocabulary security validates against without an edit of security.
type Producer struct {
	EventType     string
	SourceService string
	Service       string
	Tables        []string
}

// ProducerOf derives a producer from a service's name, bookkeeping and
// archived tables.
func ProducerOf(service string, b Bookkeeper, tables []TableSpec) Producer {
	return Producer{EventType: b.EventType, SourceService: b.SourceService, Service: service, Tables: TableNames(tables)}
}

// TableNames lists the tables of specs, in their order.
func TableNames(specs []TableSpec) []string {
	names := make([]string, 0, len(specs))
	for _, s := range specs {
		names = append(names, s.Table)
	}
	return names
}
