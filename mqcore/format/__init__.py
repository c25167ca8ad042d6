"""RocketMQ's record bytes: the only package that knows how a CommitLog record is laid out.

Everything here is pure: functions over ``bytes``/``memoryview``/``mmap`` and module-level
constants, with no store state, no files and no threads of its own (``msgid``'s
``UniqKeyGenerator`` holds a counter under a lock, nothing else does). The Spark pipeline's
executors import these modules, so they must stay picklable and need no Django settings.
They import only the standard library, numpy, isal, ``mqcore.errors``, ``mqcore.message``
and ``mqcore.clock``; ``tests/test_layering.py`` checks that nothing comes from
``mqcore.store``, ``mqcore.broker`` or ``mqcore.services``.

Modules (``docs/ARCHITECTURE.md`` has the glossary of the record's field names):

* ``layout``: the record layout table, magic codes, SYSFLAG bits, one ``struct.Struct`` per
  fixed run of fields, the TOTALSIZE length formula, the writer's cached host and topic
  encodings.
* ``record``: the record codec: encoder, validator, and the decoders that answer ``NeedMore``,
  ``Blank``, ``Corrupt`` or a result (``DispatchRequest``, ``MessageExt``). It re-exports
  ``layout`` and ``delay_levels``, so it is the one import for record work.
* ``message_decode``: the pull path's decoder, ``record.decode_record``'s result about twice
  as fast for the usual record (V1 topic, IPv4 hosts).
* ``properties``: property names and the ``name\\x01value\\x02`` encoding of PROPERTIES.
* ``msgid``: host addresses (BORNHOST, STOREHOSTADDRESS) and the two message ids,
  offsetMsgId and UNIQ_KEY.
* ``chain``: the TOTALSIZE chain walk (record starts), a reference and a vectorised form.
* ``body_crc``: BODYCRC, CRC-32 masked to 31 bits (ISA-L): every body CRC in Cairn.
* ``hashing``: Java's ``String.hashCode`` (ConsumeQueue tag codes, IndexFile key hashes), one
  scalar and one vectorised form.
* ``delay_levels``: ``messageDelayLevel`` parsing and the tag code of a delayed record (its
  deliver time).

This ``__init__`` imports nothing, so ``mqcore.message`` and the store can import any one
module without loading the rest.
"""
