"""Client-made UNIQ_KEY ids."""

from ferrymq.client.uniq_key import UniqKeyGenerator


def test_uniq_keys_are_unique_and_shaped_like_javas():
    gen = UniqKeyGenerator("10.1.2.3")
    keys = [gen.next() for _ in range(5000)]
    assert len(set(keys)) == len(keys)
    assert all(len(k) == 32 and k == k.upper() for k in keys)
    assert keys[0].startswith("0A010203")


def test_uniq_keys_in_bulk_continue_one_counter():
    gen = UniqKeyGenerator()
    keys = [gen.next(), *gen.next_many(1000), gen.next()]
    assert len(set(keys)) == len(keys)
    assert all(len(k) == 32 and k[:20] == keys[0][:20] for k in keys)
    counters = [int(k[-4:], 16) for k in keys]
    assert counters == [(counters[0] + i) & 0xFFFF for i in range(len(keys))]
