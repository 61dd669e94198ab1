import Foundation
import ArgumentParser
import KeyManager
import Sync

/// `keymgr bind`: creates a new device-bound key for a user.
struct Bind: KeymgrCommand {
    static let configuration = CommandConfiguration(
        commandName: "bind",
        abstract: "Bind a new key for a user on this device.",
        discussion: """
            Creates a P-256 key guarded by the auth type. APPLICATION_PIN asks for a new PIN (twice on a \
            terminal) or reads it with --pin-stdin / --pin-fd. With --challenge, prints the binding JWS for the \
            identity server on stdout. A user's earlier key for the same issuer is superseded: on a terminal \
            keymgr asks first (--yes or --replace does not ask); without one, a key the server knows is only \
            superseded with --replace. With --json: the key object plus "jwk" and, with --challenge, "jws".

            With --journey, the key is bound through a PingAM journey on the configured server (`keymgr server \
            set`): keymgr answers the NameCallback with --username (else --user) and the PasswordCallback with \
            the password from --password-fd N (else a no-echo prompt). The server chooses the auth type, the \
            challenge and the user id; the key is stored, as registered, only once the server accepted it (until \
            then the user's current key stays active; a refused binding leaves it as it was). With --json the key object carries "jws", \
            the JWS the server accepted.

            Example:
              printf '482916\\n' | keymgr bind --user alice --username "Alice Liddell" \\
                --auth-type app-pin --pin-stdin
              keymgr bind --journey RegisterDevice --user alice \\
                --password-fd 3 3<password.txt
            """)

    @OptionGroup var globals: GlobalOptions

    @Option(help: ArgumentHelp("The user's id at the identity server (subject or universalId).", valueName: "id"),
            completion: .custom(StoreCompletion.users))
    var user: String

    @Option(help: ArgumentHelp("The user's login name, for people reading lists.", valueName: "name"))
    var username: String?

    @Option(help: ArgumentHelp("How the key is unlocked (default: none).", valueName: "type"))
    var authType: AuthTypeArgument?

    @OptionGroup(title: "JWS") var jws: JWSOptions

    @OptionGroup(title: "PIN") var pin: PINOptions

    @OptionGroup(title: "Journey") var journey: JourneyOptions

    @Flag(help: "Supersede the user's active key without asking, even one the server knows.")
    var replace = false

    @Flag(help: "Do not ask for confirmation on a terminal.")
    var yes = false

    func validate() throws {
        if journey.journey != nil {
            try JourneyOptions.refuse(jws.decidedByTheServer)
        }
    }

    func run(in context: CommandContext) throws {
        if let name = journey.journey { return try bind(through: name, in: context) }
        let manager = try globals.openManager(in: context)
        // A journey-bound user is found by the name the operator types, so a plain bind supersedes that key.
        let userId = try manager.resolveUser(user)
        var request = BindRequest(userId: userId)
        request.username = username
        if let authType { request.authType = authType.authType }
        request.issuer = jws.issuer
        request.challenge = jws.challenge
        if let expiresIn = jws.expiresIn { request.expiresIn = expiresIn }
        if let timeout = jws.timeout { request.verifierTimeout = timeout }

        try confirmSupersede(try manager.keysSuperseded(by: request), in: context)
        let result = try manager.bind(request, newPIN: pin.source(in: context).new(for: user, policy: manager.checkNewPIN))
        try globals.render(BoundKeyOutput(result: result, confirmation: "bound \(userId): key \(result.key.kid) (\(result.key.authType.rawValue))"), in: context)
    }

    /// Superseding destroys the user's current key: on a terminal keymgr asks; without one, a key the server
    /// knows is only replaced with --replace.
    private func confirmSupersede(_ superseded: [UserKey], in context: CommandContext) throws {
        guard !superseded.isEmpty, !replace else { return }
        let list = superseded.map(\.kid).joined(separator: ", ")
        if context.inputIsTerminal {
            guard !yes else { return }
            guard try Terminal.askYesNo("\(user) already has key \(list); supersede it and destroy its key material?",
                                         on: context.terminal) else {
                throw CommandFailure(.declined, "declined: nothing was done")
            }
        } else if superseded.contains(where: { $0.serverState == .registered }) {
            throw CommandFailure(.usage, "\(user) already has key \(list), registered with the server: "
                + "add --replace to supersede it (the server's record is deleted at the next sync)")
        }
    }

    /// Binds through the journey `name`: the server's callback decides the user id, auth type and challenge.
    private func bind(through name: String, in context: CommandContext) throws {
        let manager = try globals.openManager(in: context)
        let connection = try ServerConnection.configured(in: manager, profile: journey.server.profile, environment: context.environment)
        let journeys = try JourneyService(manager: manager, connection: connection,
                                          logger: globals.logger(in: context))
        let login = try username ?? manager.login(forUser: user)
        let password = journey.passwordSource(for: login, in: context)
        let requested = authType?.authType
        let (pinStdin, pinFd, user) = (pin.pinStdin, pin.pinFd, user)
        let result = try AsyncBridge.wait {
            try await journeys.bind(journey: name, username: login, userId: user, password: { try password.read() },
                                    requestedAuthType: requested,
                                    newPIN: { try PINSource.choose(stdin: pinStdin, fd: pinFd, in: context).new(for: user, policy: manager.checkNewPIN)() })
        }
        try globals.render(BoundKeyOutput(result: result, confirmation: "bound \(result.key.userId) through \(name): key \(result.key.kid) "
            + "(\(result.key.authType.rawValue)), registered with the server as \"\(result.key.deviceName ?? "")\"", printsJWS: false), in: context)
    }
}

/// `bind` and `rebind`: the key object (`KeyJSON`), or a confirmation line and the proof-of-possession JWS when there
/// is one (a journey's bind prints none: the server already checked it).
struct BoundKeyOutput: DocumentOutput {
    let result: BindResult
    let confirmation: String
    var printsJWS = true

    var document: KeyJSON { KeyJSON(result) }

    func text(on console: Console) {
        console.confirm(confirmation)
        if printsJWS, let jws = result.jws { console.answer(jws) }
    }
}

/// A key after a change (`pin change`): the key object, or one confirmation line.
struct ChangedKeyOutput: DocumentOutput {
    let key: UserKey
    let confirmation: String

    var document: KeyJSON { KeyJSON(key) }

    func text(on console: Console) { console.confirm(confirmation) }
}
