import Foundation

/// How the server's journeys behave beyond their trees: PingAM deployment settings the tests vary.
public struct JourneyPolicy: Sendable, Equatable {
    /// The load-balancer cookie the first step sets and every later step of the same journey must return
    /// (PingAM clusters route a journey's steps to the node that holds its state by `amlbcookie`).
    public var affinityCookie: String
    /// The cookie (and header) a session travels in: `iPlanetDirectoryPro`, PingAM's default.
    public var sessionCookie: String
    /// Whether `noSession=true` on `/authenticate` is honoured (PingAM does); false issues a session anyway.
    public var honoursNoSession: Bool
    /// The Device Binding node's "Max Saved Devices": a binding beyond this many records of the user is refused.
    public var maxSavedDevices: Int?
    /// A hostile server: a signing step carries one more DeviceSigningVerifierCallback for each of these usernames
    /// (inputs `IDToken2…`, `IDToken3…`) after the one of the user who logged in.
    public var foreignSigningUsers: [String] = []
    /// A hostile server: the binding step's DeviceBindingCallback names this username instead of the user who
    /// logged in.
    public var foreignBindingUser: String?

    /// PingAM's defaults.
    public init(affinityCookie: String = "amlbcookie", sessionCookie: String = "iPlanetDirectoryPro",
                honoursNoSession: Bool = true, maxSavedDevices: Int? = nil) {
        self.affinityCookie = affinityCookie
        self.sessionCookie = sessionCookie
        self.honoursNoSession = honoursNoSession
        self.maxSavedDevices = maxSavedDevices
    }
}

/// A `clientError` a device callback was answered with: the SDKs' `Unsupported`, `ClientNotRegistered`,
/// `Timeout` or `Abort`. The journey ended in its failure outcome.
public struct JourneyClientError: Sendable, Equatable {
    /// The journey (tree) name.
    public var journey: String
    /// The callback that carried it: `DeviceBindingCallback` or `DeviceSigningVerifierCallback`.
    public var callback: String
    /// The username the journey was for; empty in a usernameless journey.
    public var user: String
    /// The value of `IDToken1clientError`.
    public var clientError: String

    public init(journey: String, callback: String, user: String, clientError: String) {
        self.journey = journey
        self.callback = callback
        self.user = user
        self.clientError = clientError
    }
}

/// A session a successful journey opened (a `tokenId`), until it is logged out.
struct OpenSession: Sendable {
    var realmPath: String
    var user: String
}
