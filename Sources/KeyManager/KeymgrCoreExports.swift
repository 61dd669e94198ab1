// What both sides of the wire need (error codes, JSONValue, Base64URL, JWK and JWS values, token values, timestamps)
// lives in KeymgrCore, which ServerClients and the reference server import without KeyManager. KeyManager's users
// see it through KeyManager, as before the split.
@_exported import KeymgrCore
