import KeyManager

/// Facade calls only the tests make, kept out of the library's surface.
extension KeyManager {
    /// Records that the server accepted the binding `kid` under `deviceName`, as a journey's registration does.
    func markRegistered(kid: String, deviceName: String?) throws {
        guard let key = try keys(userId: nil, statuses: Set(KeyStatus.allCases)).first(where: { $0.kid == kid }) else {
            throw KeyManagerError(.clientNotRegistered, "no key \(kid) on this device")
        }
        var changes = ServerChanges(userId: key.userId)
        changes.listed = [.init(kid: kid, deviceName: deviceName, lastAccessAt: nil)]
        try apply(changes)
    }
}
