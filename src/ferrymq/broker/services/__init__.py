"""The broker's messaging rules, apart from any wire protocol: putting a message and reading one.

Remoting processors, and protocol fronts embedded in a broker process (through
``ferrymq.messaging.local``), call these with plain decoded values and turn the outcome into their
own answers; no rule about what may be stored or read lives anywhere else. Pop-style consumption
(pop, ack, change invisible time) is the third service of this kind.
"""
