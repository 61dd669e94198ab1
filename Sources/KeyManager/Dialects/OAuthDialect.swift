/// Curity or any standards-based authorization server: OAuth endpoints only, no device registry, no journeys.
struct OAuthDialect: ServerDialect {
    var name: DialectName { .oauth }
    var aliases: [String] { ["curity"] }
    /// The first schema named this dialect `curity`, and the column keeps that spelling.
    var storedName: String { "curity" }
    var deviceRegistry: DeviceRegistryAPI? { nil }
    var journeys: JourneyAPI? { nil }
    var registrations: RegistrationAPI? { .rfc7591 }
    /// An OAuth server is named by its issuer.
    var issuerStandsForBaseURL: Bool { true }
    var missingBaseURL: String { "give --base-url or --issuer: an OAuth profile needs one of them" }
}
