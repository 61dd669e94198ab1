/// PingAM / PingOne Advanced Identity Cloud: device REST and journeys, on top of the OAuth endpoints.
struct PingAMDialect: ServerDialect {
    var name: DialectName { .pingam }
    var aliases: [String] { [] }
    var storedName: String { "pingam" }
    var deviceRegistry: DeviceRegistryAPI? { .pingAMDeviceREST }
    var journeys: JourneyAPI? { .pingAMAuthenticate }
    var registrations: RegistrationAPI? { .rfc7591 }
    var issuerStandsForBaseURL: Bool { false }
    var missingBaseURL: String { "give --base-url: a PingAM profile needs the server's base URL, e.g. https://am.example.com/am" }
}
