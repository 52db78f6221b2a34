# Accepts connections on IP:80 and closes them, so that P2P-Client's getLocalIP()
# (new Socket("www.google.de", 80).getLocalAddress(), P2P.java:1016-1030) works offline:
# the hosts file maps www.google.de to IP, the shim makes the source address IP.
# Binding port 80 needs root or net.ipv4.ip_unprivileged_port_start <= 80.
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 80)); s.listen(8)
while True:
    c, _ = s.accept(); c.close()
